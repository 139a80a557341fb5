"""Config files that can say where a mistake is.

``read_yaml`` returns a file's data together with the line of every key; ``apply_overrides``
sets ``KEY=VALUE`` pairs from the command line (dotted keys, list items by index or by their
``name``, values read as YAML) and remembers which paths they set; ``validate`` runs a pydantic
model over the data and turns its errors into one ``ConfigError`` whose problems each read
``file:line: field: message`` (or ``override KEY=VALUE: message``), with the valid keys and
the nearest one for an unknown key.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from trajforge.errors import ConfigError

KeyPath = tuple[str | int, ...]
ModelT = TypeVar("ModelT", bound=BaseModel)

_MERGE_TAG = "tag:yaml.org,2002:merge"
_SHOWN_INPUT_CHARS = 60


class _Loader(yaml.SafeLoader):
    """YAML as configs mean it: PyYAML follows YAML 1.1, where ``1e-4`` (no dot) is a string,
    which would reach ``estimator_kwargs`` and the like as text."""


# add_implicit_resolver would append to lists shared with SafeLoader; copy them first.
_Loader.yaml_implicit_resolvers = {
    first: list(resolvers) for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


@dataclass(frozen=True)
class Origin:
    """Where a config's values came from, so that problems can point at them.

    ``lines`` maps key paths (``("stages", 4, "train", "steps")``) to 1-based lines of ``file``;
    ``overrides`` maps the paths set on the command line to the ``KEY=VALUE`` that set them;
    ``names`` maps list items that have a ``name`` to it, so that paths read ``stages.rl``.
    """

    file: str
    lines: Mapping[KeyPath, int] = field(default_factory=dict)
    overrides: Mapping[KeyPath, str] = field(default_factory=dict)
    names: Mapping[KeyPath, str] = field(default_factory=dict)

    def show(self, path: KeyPath) -> str:
        """``path`` the way a user writes it: dotted, list items by name where they have one."""
        parts = [
            self.names.get(path[: n + 1], str(part)) if isinstance(part, int) else str(part)
            for n, part in enumerate(path)
        ]
        return ".".join(parts)

    def problem(self, path: KeyPath, message: str) -> str:
        """``message`` about the value at ``path``, prefixed with where that value was given."""
        for n in range(len(path), -1, -1):
            text = self.overrides.get(path[:n])
            if text is not None:
                # The override already names the key unless the problem lies below it.
                below = f"{self.show(path)}: " if n < len(path) else ""
                return f"override {text}: {below}{message}"
        line = next(
            (self.lines[path[:n]] for n in range(len(path), 0, -1) if path[:n] in self.lines), None
        )
        place = self.file if line is None else f"{self.file}:{line}"
        return f"{place}: {self.show(path)}: {message}" if path else f"{place}: {message}"


def raise_problems(problems: Sequence[str]) -> None:
    """One ``ConfigError`` holding every problem (one line, as the CLI prints it), if any."""
    if problems:
        raise ConfigError("; ".join(dict.fromkeys(problems)))


def first_problem(exc: ValidationError, whole: str) -> tuple[str, str]:
    """The first problem of ``exc``: the dotted path of its field (``whole`` where the problem
    is the whole value) and what is wrong."""
    err = exc.errors(include_url=False)[0]
    return ".".join(str(p) for p in err["loc"]) or whole, err["msg"]


def validated(cls: type[ModelT], data: Any, where: str, whole: str) -> ModelT:
    """``cls`` built from ``data``, or a ``ConfigError`` naming ``where`` and the first problem's
    field (``whole`` where the problem is the whole value)."""
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        field_path, msg = first_problem(exc, whole)
    # Raised outside the except block so that --debug shows no pydantic traceback behind it.
    raise ConfigError(f"{where}: {field_path}: {msg}")


def repeated(names: Sequence[str]) -> list[str]:
    """The names given more than once, sorted."""
    return sorted({n for n in names if names.count(n) > 1})


def unknown_key_message(key: str, valid: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown key{hint}; valid keys: {', '.join(valid)}"


# -- reading -----------------------------------------------------------------------------------


def read_yaml(path: Path) -> tuple[dict[str, Any], Origin]:
    """The mapping in YAML file ``path`` and where each of its keys is."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file (it is not UTF-8)") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror}") from None
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        place = f"{path}:{mark.line + 1}" if mark else str(path)
        column = f" (column {mark.column + 1})" if mark else ""
        raise ConfigError(
            f"{place}: not valid YAML: {exc.problem or exc.context}{column}"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}:1: the top level must be a mapping of keys, not {type(data).__name__}"
        )
    origin = Origin(str(path))
    lines: dict[KeyPath, int] = {}
    if node is not None:
        _collect_lines(node, (), lines, origin, set())
    return data, replace(origin, lines=lines, names=item_names(data))


def _collect_lines(
    node: yaml.Node, path: KeyPath, out: dict[KeyPath, int], origin: Origin, active: set[int]
) -> None:
    if id(node) in active:  # an alias of one of its own parents
        return
    active.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[tuple[str, str], int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
                continue
            line = key_node.start_mark.line + 1
            key_path = (*path, key_node.value)
            first = seen.setdefault((key_node.tag, key_node.value), line)
            if first != line:
                # PyYAML keeps the last of two equal keys without a word; the first is lost.
                raise ConfigError(
                    f"{origin.file}:{line}: {origin.show(key_path)}: given twice (also line {first})"
                )
            out[key_path] = line
            _collect_lines(value_node, key_path, out, origin, active)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            out[(*path, index)] = item.start_mark.line + 1
            _collect_lines(item, (*path, index), out, origin, active)
    active.discard(id(node))


def item_names(data: Any, path: KeyPath = ()) -> dict[KeyPath, str]:
    """The ``name`` of every list item (at any depth) that is a mapping with one."""
    names: dict[KeyPath, str] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            names.update(item_names(value, (*path, key)))
    elif isinstance(data, list):
        for index, item in enumerate(data):
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                names[(*path, index)] = item["name"]
            names.update(item_names(item, (*path, index)))
    return names


# -- overrides ---------------------------------------------------------------------------------


def apply_overrides(data: dict[str, Any], origin: Origin, overrides: Iterable[str]) -> Origin:
    """Set each ``KEY=VALUE`` in ``data`` (in place); the returned origin knows which paths the
    overrides set, so that a bad key or value names the override rather than the file."""
    set_by: dict[KeyPath, str] = dict(origin.overrides)
    for text in overrides:
        key, sep, value_text = text.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise ConfigError(
                f"override {text!r}: write KEY=VALUE with a dotted key, e.g. optim.lr=1e-4 "
                "or stages.rl.train.steps=3"
            )
        try:
            value = yaml.load(value_text, Loader=_Loader)  # _Loader is a SafeLoader
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or exc
            raise ConfigError(f"override {text}: the value is not valid YAML: {problem}") from None
        set_by[_set(data, parts, value, text)] = text
    return replace(origin, overrides=set_by, names=item_names(data))


def _set(data: dict[str, Any], parts: list[str], value: Any, text: str) -> KeyPath:
    cur: Any = data
    path: list[str | int] = []
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        where = ".".join(parts[:depth]) or "the top level"
        if isinstance(cur, dict):
            if last:
                cur[part] = value
            elif cur.get(part) is None:
                cur[part] = {}
            elif not isinstance(cur[part], dict | list):
                raise ConfigError(
                    f"override {text}: {'.'.join(parts[: depth + 1])} is a value "
                    f"({cur[part]!r}), not a mapping of keys"
                )
            key: str | int = part
        elif isinstance(cur, list):
            found = _item_index(cur, part)
            if found is None:
                labels = [str(it["name"]) for it in cur if isinstance(it, dict) and "name" in it]
                close = difflib.get_close_matches(part, labels, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                indices = f"indices 0 to {len(cur) - 1}" if cur else "none, the list is empty"
                choices = ", ".join(labels) or indices
                raise ConfigError(
                    f"override {text}: {where} has no item {part!r}{hint}; items: {choices}"
                )
            if last:
                cur[found] = value
            key = found
        else:
            raise ConfigError(f"override {text}: {where} is a value ({cur!r}), not a mapping")
        path.append(key)
        if not last:
            cur = cur[key]
    return tuple(path)


def _item_index(items: list[Any], part: str) -> int | None:
    """The list item called ``part`` (its ``name``), else the one at index ``part``."""
    for index, item in enumerate(items):
        if isinstance(item, dict) and item.get("name") == part:
            return index
    if part.isdigit() and int(part) < len(items):
        return int(part)
    return None


# -- validation --------------------------------------------------------------------------------


def validate(
    data: Mapping[str, Any], cls: type[ModelT], origin: Origin, at: KeyPath = ()
) -> ModelT:
    """``cls`` built from ``data``, which sits at ``at`` inside ``origin``'s document."""
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        problems = [_describe(err, cls, origin, at) for err in exc.errors()]
    # Raised outside the except block so that --debug shows no pydantic traceback behind it.
    raise ConfigError("; ".join(dict.fromkeys(problems)))


def _describe(err: Any, cls: type[BaseModel], origin: Origin, at: KeyPath) -> str:
    path, owner = resolve_loc(cls, err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden" and owner is not None and path:
        message = unknown_key_message(str(path[-1]), list(owner.model_fields))
    elif kind == "missing":
        message = "required"
    elif kind == "value_error" and "error" in err.get("ctx", {}):
        message = str(err["ctx"]["error"])
    else:
        message = err["msg"]
        given = err.get("input")
        if given is None or isinstance(given, str | int | float):
            shown = repr(given)
            if len(shown) > _SHOWN_INPUT_CHARS:
                shown = shown[: _SHOWN_INPUT_CHARS - 3] + "..."
            message += f" (got {shown})"
    return origin.problem((*at, *path), message)


def resolve_loc(
    cls: type[BaseModel], loc: Sequence[str | int]
) -> tuple[KeyPath, type[BaseModel] | None]:
    """A pydantic error location as the path in the data, without the tags pydantic adds for
    union members (``stages.0.eval.colour`` is ``stages.0.colour``), and the model class whose
    field the last part is (``None`` when it is a list item or a dict key)."""
    path: list[str | int] = []
    owner: type[BaseModel] | None = None
    tp: Any = cls
    discriminator: str | None = None
    for part in loc:
        tp, discriminator = _strip(tp, discriminator)
        if get_origin(tp) in (Union, types.UnionType):
            member = _member_for(get_args(tp), part, discriminator)
            if member is not None:
                tp, discriminator = member, None
                continue
            tp = Any
        path.append(part)
        owner = None
        origin = get_origin(tp)
        args = get_args(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            owner = tp
            info = tp.model_fields.get(str(part))
            tp, discriminator = (info.annotation, _discriminator_of(info)) if info else (Any, None)
        elif origin is tuple and args and isinstance(part, int):
            tp = args[0] if args[-1] is Ellipsis else args[min(part, len(args) - 1)]
        elif origin in (list, set, frozenset) and args:
            tp = args[0]
        elif origin is dict and len(args) == 2:
            tp = args[1]
        else:
            tp = Any
    return tuple(path), owner


def _strip(tp: Any, discriminator: str | None) -> tuple[Any, str | None]:
    """``tp`` without ``Annotated`` (keeping a discriminator it names) and without ``| None``."""
    while True:
        if get_origin(tp) is Annotated:
            tp, *meta = get_args(tp)
            for item in meta:
                found = getattr(item, "discriminator", None)
                if isinstance(found, str):
                    discriminator = found
            continue
        if get_origin(tp) in (Union, types.UnionType):
            members = [a for a in get_args(tp) if a is not type(None)]
            if len(members) == 1:
                tp = members[0]
                continue
        return tp, discriminator


def _member_for(members: Sequence[Any], tag: str | int, discriminator: str | None) -> Any:
    for member in members:
        inner, _ = _strip(member, None)
        if discriminator and isinstance(inner, type) and issubclass(inner, BaseModel):
            info = inner.model_fields.get(discriminator)
            if info is not None and tag in get_args(info.annotation):
                return inner
        if getattr(inner, "__name__", None) == tag:
            return inner
    return None


def _discriminator_of(info: FieldInfo) -> str | None:
    return info.discriminator if isinstance(info.discriminator, str) else None


def load_file(
    path: Path, cls: type[ModelT], overrides: Iterable[str] = ()
) -> tuple[ModelT, Origin]:
    """``cls`` from YAML file ``path`` with ``overrides`` applied, and where its keys came from."""
    data, origin = read_yaml(path)
    origin = apply_overrides(data, origin, overrides)
    return validate(data, cls, origin), origin
