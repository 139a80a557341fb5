"""``trajforge config show sft|dpo|rl|distill|experiment`` and ``trajforge config docs``.

Both are generated from the config models and the docstrings under their fields, so the
defaults a user reads are the ones that run: ``show`` prints commented YAML that loads as it
stands, ``docs`` writes ``docs/configuration.md`` (a test keeps that file equal to this output).
"""

from __future__ import annotations

import inspect
import re
import textwrap
import types
from enum import Enum, StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import typer
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from trajforge.cli.common import err_console
from trajforge.errors import ConfigError
from trajforge.pipeline import STAGE_KINDS, Experiment
from trajforge.train import DistillConfig, DPOConfig, RLConfig, SFTConfig

WIDTH = 96
_BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))


class ConfigKind(StrEnum):
    SFT = "sft"
    DPO = "dpo"
    RL = "rl"
    DISTILL = "distill"
    EXPERIMENT = "experiment"


def config_models() -> dict[ConfigKind, type[BaseModel]]:
    """The model behind each kind of config file."""
    return {
        ConfigKind.SFT: SFTConfig,
        ConfigKind.DPO: DPOConfig,
        ConfigKind.RL: RLConfig,
        ConfigKind.DISTILL: DistillConfig,
        ConfigKind.EXPERIMENT: Experiment,
    }


COMMANDS = {
    ConfigKind.SFT: "trajforge train sft --config FILE",
    ConfigKind.DPO: "trajforge train dpo --config FILE",
    ConfigKind.RL: "trajforge train rl --config FILE",
    ConfigKind.DISTILL: "trajforge train distill --config FILE",
    ConfigKind.EXPERIMENT: "trajforge run FILE",
}


# -- text from docstrings -----------------------------------------------------------------------


def _prose(text: str | None) -> str:
    """A docstring as one line of prose, with reST ````code```` written as Markdown ``code``."""
    return re.sub(r"``(.+?)``", r"`\1`", " ".join((text or "").split()))


def _paragraphs(doc: str | None) -> list[str]:
    return [_prose(p) for p in inspect.cleandoc(doc or "").split("\n\n") if p.strip()]


def _class_doc(cls: type[BaseModel]) -> str | None:
    # pydantic gives every model BaseModel's docstring when it has none of its own.
    return cls.__doc__ if cls.__doc__ and cls.__doc__ != BaseModel.__doc__ else None


def example(cls: type[BaseModel]) -> BaseModel:
    """``cls`` with its defaults, and the first example of each required field."""
    given = {
        name: info.examples[0]
        for name, info in cls.model_fields.items()
        if info.is_required() and info.examples
    }
    return cls.model_validate(given)


# -- commented YAML ------------------------------------------------------------------------------


def _scalar(value: Any) -> str:
    """``value`` as one line of YAML."""
    if isinstance(value, Enum):
        value = value.value
    elif isinstance(value, Path):
        value = str(value)
    elif isinstance(value, tuple):
        value = list(value)
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False)
    return text.strip().removesuffix("...").strip()


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model class ``annotation`` is, or holds as ``Model | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return _optional_model(annotation)


def _optional_model(annotation: Any) -> type[BaseModel] | None:
    """The model class in ``Model | None``."""
    members = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else ()
    models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
    return models[0] if len(models) == 1 else None


def _comment(text: str, pad: str) -> list[str]:
    return [f"{pad}# {line}" for line in textwrap.wrap(text, WIDTH - len(pad) - 2)]


def _model_lines(obj: BaseModel, indent: int, *, describe: bool = True) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    for name, info in type(obj).model_fields.items():
        # A required key of an optional sub-model shown unset (``model_construct``) has none.
        value = getattr(obj, name, None)
        if describe:
            required = "(required) " if info.is_required() else ""
            lines += _comment(required + _prose(info.description), pad)
        if isinstance(value, BaseModel):
            lines += [f"{pad}{name}:", *_model_lines(value, indent + 2, describe=describe)]
        elif isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value):
            lines.append(f"{pad}{name}:")
            seen: set[type[BaseModel]] = set()
            for item in value:
                # Items of a kind already shown once need not repeat its explanations.
                lines += _item_lines(item, indent + 2, describe=type(item) not in seen)
                seen.add(type(item))
        else:
            lines.append(f"{pad}{name}: {_scalar(value)}")
            sub = _optional_model(info.annotation)
            if value is None and sub is not None:
                # The keys it takes when given, commented out, ready to be switched on.
                inner = _model_lines(sub.model_construct(), 2, describe=False)
                lines += [f"{pad}# {name}:", *(f"{pad}# {line}" for line in inner)]
    return lines


def _item_lines(item: BaseModel, indent: int, *, describe: bool) -> list[str]:
    """A model as an item of a block sequence, under its class docstring."""
    body = _model_lines(item, indent + 2, describe=describe)
    first = next(i for i, line in enumerate(body) if not line.lstrip().startswith("#"))
    doc = _paragraphs(_class_doc(type(item))) if describe else []
    head = _comment(doc[0], " " * indent) if doc else []
    return [*head, " " * indent + "- " + body[first].lstrip(), *body[first + 1 :]]


def commented_yaml(kind: ConfigKind) -> str:
    """The effective defaults of ``kind`` as YAML with every key explained; it loads as is."""
    cls = config_models()[kind]
    head = [f"{cls.__name__}: the defaults of `{COMMANDS[kind]}`."]
    head += _paragraphs(_class_doc(cls))
    lines: list[str] = []
    for paragraph in head:
        lines += [*_comment(paragraph, ""), "#"]
    lines[-1] = ""
    lines += _model_lines(example(cls), 0)
    return "\n".join(lines) + "\n"


# -- Markdown reference -------------------------------------------------------------------------


def _type_text(annotation: Any, info: FieldInfo) -> str:
    """The type of a field as a reader wants it: ``int ≥ 1 or null``."""
    inner = annotation
    members = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else ()
    rest = [m for m in members if m is not type(None)]
    nullable = len(rest) == 1 and len(members) == 2
    if nullable:
        inner = rest[0]
    text = _bare_type(inner)
    bounds = [
        f"{sign} {bound}"
        for meta in info.metadata
        for attr, sign in _BOUNDS
        if (bound := getattr(meta, attr, None)) is not None
    ]
    if bounds:
        text += " " + " and ".join(bounds)
    for meta in info.metadata:
        if getattr(meta, "min_length", None):
            text += f", at least {meta.min_length}"
        if getattr(meta, "pattern", None):
            text += f" matching `{meta.pattern}`"
    return text + (" or null" if nullable else "")


def _bare_type(tp: Any) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return _bare_type(args[0])
    if origin in (Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if len(members) > 1 and all(_model_of(m) for m in members):
            return "stage"
        text = " or ".join(_bare_type(m) for m in members)
        return text + (" or null" if len(members) < len(args) else "")
    if origin is Literal:
        values = ", ".join(f"`{a}`" for a in args)
        return values if len(args) == 1 else f"one of {values}"
    if isinstance(tp, type) and issubclass(tp, Enum):
        return "one of " + ", ".join(f"`{m.value}`" for m in tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return "mapping"
    if origin in (list, set):
        return f"list of {_bare_type(args[0])}" if args else "list"
    if origin is tuple:
        return "[" + ", ".join(_bare_type(a) for a in args) + "]"
    if origin is dict or tp is dict:
        return "mapping"
    if tp is Path:
        return "path"
    return getattr(tp, "__name__", str(tp))


def _default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    return "see below" if isinstance(value, BaseModel) else f"`{_scalar(value)}`"


def _rows(cls: type[BaseModel], prefix: str = "") -> list[str]:
    rows = []
    for name, info in cls.model_fields.items():
        key = prefix + name
        description = _prose(info.description).replace("|", "\\|")
        type_text = _type_text(info.annotation, info).replace("|", "\\|")
        rows.append(f"| `{key}` | {type_text} | {_default_text(info)} | {description} |")
        sub = _model_of(info.annotation)
        if sub is not None:
            rows += _rows(sub, key + ".")
    return rows


def _blocks(doc: str | None) -> list[str]:
    """A docstring's paragraphs as Markdown: one line each, a blank line after each."""
    return [line for paragraph in _paragraphs(doc) for line in (paragraph, "")]


def _table(cls: type[BaseModel], prefix: str = "") -> list[str]:
    return ["| key | type | default | description |", "|---|---|---|---|", *_rows(cls, prefix)]


def reference_markdown() -> str:
    """``docs/configuration.md``: every key of every config file, with type, default, purpose."""
    out = [
        "# Configuration reference",
        "",
        "Generated by `trajforge config docs --out docs/configuration.md` from the config models;",
        "a test keeps this page equal to them. `trajforge config show sft|dpo|rl|distill|experiment`",
        "prints the same defaults as commented YAML that loads as it stands.",
        "",
        "Unknown keys are errors that name the file, the line and the key, with the valid keys.",
        "On the command line, `KEY=VALUE` arguments set keys over the file's: dotted keys, values",
        "read as YAML, list items by index or by name. For example",
        "`trajforge train rl --config rl.yaml steps=3 optim.lr=2e-5` or",
        "`trajforge run experiment.yaml stages.rl.train.steps=3 eval.tasks=10`.",
        "",
    ]
    sections = [
        (ConfigKind.EXPERIMENT, "Experiment"),
        (ConfigKind.SFT, "SFT"),
        (ConfigKind.DPO, "DPO"),
        (ConfigKind.RL, "RL"),
        (ConfigKind.DISTILL, "On-policy distillation"),
    ]
    models = config_models()
    for kind, title in sections:
        cls = models[kind]
        out += [f"## {title}: `{COMMANDS[kind]}`", "", *_blocks(_class_doc(cls))]
        out += [*_table(cls), ""]
        if kind is ConfigKind.EXPERIMENT:
            for stage in STAGE_KINDS:
                tag = stage.model_fields["kind"].default
                out += [f"### Stage kind `{tag}`", "", *_blocks(_class_doc(stage))]
                out += [*_table(stage, "stages[]."), ""]
    return "\n".join(out).rstrip("\n") + "\n"


# -- commands -----------------------------------------------------------------------------------


def show_command(
    kind: Annotated[ConfigKind, typer.Argument(help="Which config file.")],
) -> None:
    """Print the defaults of a config file as commented YAML (redirect it to start a file)."""
    typer.echo(commented_yaml(kind), nl=False)


def docs_command(
    out: Annotated[
        Path | None, typer.Option("--out", help="Write here instead of printing.")
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Only check that --out is current (exit 1 if not).")
    ] = False,
) -> None:
    """Print (or write) the reference of every config key: docs/configuration.md."""
    text = reference_markdown()
    if out is None:
        if check:
            raise ConfigError("--check: give the file to check with --out")
        typer.echo(text, nl=False)
        return
    if check:
        current = out.read_text() if out.is_file() else None
        if current != text:
            err_console.print(f"{out} is out of date: run trajforge config docs --out {out}")
            raise typer.Exit(1)
        return
    out.write_text(text)
    err_console.print(f"wrote {out}")


def register(app: typer.Typer) -> None:
    """Add the config commands to ``app``."""
    config_app = typer.Typer(help="Config files: defaults and key reference.", no_args_is_help=True)
    config_app.command("show")(show_command)
    config_app.command("docs")(docs_command)
    app.add_typer(config_app, name="config")
