"""Named things and user code by reference: one ``Registry`` type, one loader.

A ``Registry[T]`` maps names to objects (scorers, estimators, losses, tool-call parsers,
policy loaders). An unknown name is a ``ConfigError`` listing the valid names and the closest
one. User code is named ``package.module:attr`` (a module on the Python path or in the current
directory) or ``path/to/file.py:attr``; ``load_ref`` imports it.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, TypeVar

from trajforge.errors import ConfigError

T = TypeVar("T")


def did_you_mean(name: str, choices: list[str]) -> str:
    """`` (did you mean 'x'?)`` for the choice closest to ``name``, else ``""``."""
    close = difflib.get_close_matches(name, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def keyword_options(fn: Callable[..., Any]) -> list[str]:
    """The keyword-only parameters of ``fn``: the options a registered function takes."""
    return [p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY]


def refuse_unknown_options(what: str, fn: Callable[..., Any], given: Iterable[str]) -> None:
    """A ``ConfigError`` for the first of ``given`` that ``fn`` (``what``, e.g. ``loss 'gspo'``)
    takes no keyword option of."""
    allowed = keyword_options(fn)
    for key in given:
        if key not in allowed:
            takes = ", ".join(allowed) or "no options"
            raise ConfigError(f"{what}: unknown option {key!r}; it takes {takes}")


def is_ref(name: str) -> bool:
    """Whether ``name`` points at user code (``module:attr`` or ``file.py:attr``)."""
    target, sep, attr = name.rpartition(":")
    return bool(sep and target and attr)


def absolute_ref(ref: str) -> str:
    """``ref`` with a file target made absolute, so that it names the same code from any
    folder (a run stores it; ``--resume`` may start elsewhere). Other names are unchanged."""
    target, _, attr = ref.rpartition(":")
    if not is_ref(ref) or not _is_file(target):
        return ref
    return f"{Path(target).expanduser().resolve()}:{attr}"


def _is_file(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


class Registry(Generic[T]):
    """Objects of one kind by name.

    Args:
        kind: What the objects are, for messages (``scorer``, ``estimator``).
        plural: The plural of ``kind`` when it is not ``kind + "s"``.
        hint: What else may name one, for the unknown-name error (``or your own: ...``).
    """

    def __init__(self, kind: str, plural: str | None = None, *, hint: str = "") -> None:
        self.kind = kind
        self.plural = plural or f"{kind}s"
        self.hint = hint
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> T:
        """Register ``item`` under ``name`` (a later registration of the name replaces it)."""
        self._items[str(name)] = item
        return item

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated object under ``name`` and return it unchanged."""

        def deco(item: T) -> T:
            return self.add(name, item)

        return deco

    def get(self, name: str) -> T:
        """The object registered as ``name``.

        Raises:
            ConfigError: no such name; the message lists the valid ones and the closest.
        """
        try:
            return self._items[name]
        except KeyError:
            raise self.unknown(name) from None

    def unknown(self, name: str) -> ConfigError:
        """The error for a name nothing is registered under."""
        names = self.names()
        hint = f"; {self.hint}" if self.hint else ""
        return ConfigError(
            f"unknown {self.kind} {name!r}{did_you_mean(name, names)}; "
            f"known {self.plural}: {', '.join(names) or 'none'}{hint}"
        )

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._items)

    def load(self, ref: str) -> Any:
        """The object user code ``ref`` (``module:attr`` or ``file.py:attr``) names."""
        return load_ref(ref, self.kind)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"


def load_ref(ref: str, kind: str) -> Any:
    """The attribute ``ref`` names: ``package.module:attr`` or ``path/to/file.py:attr``.

    Raises:
        ConfigError: the reference is malformed, the module cannot be found, or it has no
            such attribute (messages start with ``{kind} {ref!r}:``).
    """
    if not is_ref(ref):
        raise ConfigError(f"{kind} {ref!r}: write user code as module:attr or file.py:attr")
    target, _, attr = ref.rpartition(":")
    module = load_module(ref, target, kind)
    if not hasattr(module, attr):
        raise ConfigError(f"{kind} {ref!r}: {target} has no attribute {attr!r}")
    return getattr(module, attr)


def load_module(ref: str, target: str, kind: str) -> ModuleType:
    """Import ``target``, a dotted module name or a ``.py`` file (once per file, by its path)."""
    if _is_file(target):
        return _load_file(ref, Path(target).expanduser().resolve(), kind)
    # The ``trajforge`` script's sys.path starts at its own folder, not the current directory
    # as ``python -m`` would; appended last, a user's file never shadows an installed module.
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.append(cwd)
    importlib.invalidate_caches()
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name == target.partition(".")[0]:
            raise ConfigError(
                f"{kind} {ref!r}: cannot import module {target!r}: "
                f"it is neither on the Python path nor in {cwd}"
            ) from None
        raise ConfigError(f"{kind} {ref!r}: cannot import module {target!r}: {exc}") from None


def _load_file(ref: str, path: Path, kind: str) -> ModuleType:
    if not path.is_file():
        raise ConfigError(f"{kind} {ref!r}: file {path} does not exist")
    # One module per file, whatever names it: an env and a scorer in one file share its state.
    module_name = f"trajforge_user_{abs(hash(str(path)))}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    file_spec = importlib.util.spec_from_file_location(module_name, path)
    if file_spec is None or file_spec.loader is None:
        raise ConfigError(f"{kind} {ref!r}: cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(file_spec)
    sys.modules[module_name] = module
    try:
        file_spec.loader.exec_module(module)
    except Exception:
        del sys.modules[module_name]
        raise
    return module


def lazy_names(package: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """A package's module-level ``__getattr__`` that imports each name of ``homes`` (name ->
    submodule) from its submodule on first access, so importing the package loads none of
    them (``__getattr__ = lazy_names(__name__, {...})``)."""

    def attribute(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{home}"), name)

    return attribute
