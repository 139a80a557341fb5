"""``@tool``: a typed Python function with a Google-style docstring becomes a callable ``Tool``.

The tool's ``ToolSpec`` (an OpenAI function schema) comes from the signature (JSON types from the
annotations; parameters with defaults are not required) and the docstring (the summary is the
description, the ``Args:`` section describes each argument). Arguments are validated against the
signature with a pydantic model before the function runs, and a bad argument yields a message
that names it: ``argument 'x': expected integer, got 'abc'``.

A parameter annotated ``ToolContext`` is not part of the schema: the environment injects the
episode's context (task and per-episode state) into it.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin, overload

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

from trajforge.errors import TrajforgeError
from trajforge.schema import FunctionSpec, Task, ToolSpec


class ToolError(TrajforgeError):
    """Raised by a tool to report a failure the model should read verbatim (no exception name)."""


class ToolArgumentError(ToolError):
    """The arguments of a call do not match the tool's signature."""


class ToolDefinitionError(TrajforgeError):
    """A function cannot become a tool (missing annotation, ``*args``, bad name)."""


@dataclass
class ToolContext:
    """What a tool may know about its episode: the task and a per-episode scratch ``state``.

    The episode's verifier receives the same ``state`` (``Evidence.state``), so what the tools
    record there (a cart, a board) is what gets judged."""

    task: Task
    state: dict[str, Any] = field(default_factory=dict)


_JSON_TYPES: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def json_schema_for(annotation: Any) -> dict[str, Any]:
    """The JSON schema of a parameter annotation, in the plain style OpenAI function specs use."""
    if annotation is Any or annotation is inspect.Parameter.empty:
        return {}
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    if annotation is type(None):
        return {"type": "null"}
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is typing.Annotated:
        return json_schema_for(args[0])
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        nullable = len(members) < len(args)
        inner = (
            json_schema_for(members[0])
            if len(members) == 1
            else {"anyOf": [json_schema_for(m) for m in members]}
        )
        if nullable:
            if isinstance(inner.get("type"), str):
                return {**inner, "type": [inner["type"], "null"]}
            return {"anyOf": [inner, {"type": "null"}]}
        return inner
    if origin is Literal:
        kinds = {_JSON_TYPES.get(type(v)) for v in args}
        schema: dict[str, Any] = {"enum": list(args)}
        if len(kinds) == 1 and None not in kinds:
            schema["type"] = kinds.pop()
        return schema
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = [m.value for m in annotation]
        kinds = {_JSON_TYPES.get(type(v)) for v in values}
        schema = {"enum": values}
        if len(kinds) == 1 and None not in kinds:
            schema["type"] = kinds.pop()
        return schema
    if origin in (list, set, frozenset) or annotation in (list, set, frozenset):
        return {"type": "array", "items": json_schema_for(args[0])} if args else {"type": "array"}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": json_schema_for(args[0])}
        return {"type": "array", "prefixItems": [json_schema_for(a) for a in args]}
    if origin is dict or annotation is dict:
        if len(args) == 2:
            return {"type": "object", "additionalProperties": json_schema_for(args[1])}
        return {"type": "object"}
    return _strip_titles(TypeAdapter(annotation).json_schema())


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Examples?|Notes?)\s*:\s*$"
)
_ARG_LINE = re.compile(r"^\s*\*{0,2}(\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Google-style docstring -> (summary, {argument: description})."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    arg_indent = -1
    for line in lines:
        header = _SECTION.match(line)
        if header:
            section, current, arg_indent = header.group(1).lower(), None, -1
            continue
        if section is None:
            if not line.strip() and summary:
                section = "body"
            elif line.strip():
                summary.append(line.strip())
            continue
        if section not in ("args", "arguments", "parameters") or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        match = _ARG_LINE.match(line)
        if match and (arg_indent < 0 or indent <= arg_indent):
            arg_indent = indent
            current = match.group(1)
            args[current] = match.group(3).strip()
        elif current is not None:
            args[current] = f"{args[current]} {line.strip()}".strip()
    return " ".join(summary), args


def _describe_input(value: Any) -> str:
    if isinstance(value, str):
        text = repr(value)
    else:
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_EXPECTED_BY_PREFIX = (
    ("int", "integer"),
    ("float", "number"),
    ("decimal", "number"),
    ("string", "string"),
    ("str", "string"),
    ("bool", "boolean"),
    ("list", "array"),
    ("tuple", "array"),
    ("set", "array"),
    ("dict", "object"),
    ("model", "object"),
    ("none", "null"),
)


def _format_loc(loc: tuple[int | str, ...]) -> str:
    text = str(loc[0])
    for part in loc[1:]:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def format_validation_error(exc: ValidationError) -> str:
    """A pydantic error on tool arguments -> one line per problem, naming each argument."""
    problems: list[str] = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        name = _format_loc(loc) if loc else "arguments"
        kind = err["type"]
        if kind == "missing":
            problems.append(f"missing required argument '{name}'")
        elif kind == "extra_forbidden":
            problems.append(f"unexpected argument '{name}'")
        elif kind in ("literal_error", "enum"):
            expected = err.get("ctx", {}).get("expected", "")
            got = _describe_input(err.get("input"))
            problems.append(f"argument '{name}': expected {expected}, got {got}")
        else:
            expected = next((j for p, j in _EXPECTED_BY_PREFIX if kind.startswith(p + "_")), None)
            got = _describe_input(err.get("input"))
            if expected is not None and ("type" in kind or "parsing" in kind or "from" in kind):
                problems.append(f"argument '{name}': expected {expected}, got {got}")
            else:
                problems.append(f"argument '{name}': {err['msg'][0].lower()}{err['msg'][1:]}")
    return "; ".join(problems)


class Tool:
    """A function the agent can call: its spec, argument validation and the function itself.

    Calling the ``Tool`` object directly calls the wrapped function unchanged.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.timeout = timeout
        self.is_async = inspect.iscoroutinefunction(fn)
        summary, arg_docs = parse_docstring(fn.__doc__)
        self.description = description if description is not None else summary
        hints = typing.get_type_hints(fn, include_extras=True)
        properties: dict[str, Any] = {}
        required: list[str] = []
        fields: dict[str, Any] = {}
        self.context_param: str | None = None
        for pname, param in inspect.signature(fn).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ToolDefinitionError(
                    f"tool {self.name!r}: *{pname} parameters cannot be described"
                )
            if param.kind is param.POSITIONAL_ONLY:
                raise ToolDefinitionError(
                    f"tool {self.name!r}: parameter {pname!r} is positional-only"
                )
            if pname not in hints:
                raise ToolDefinitionError(
                    f"tool {self.name!r}: parameter {pname!r} has no type annotation"
                )
            annotation = hints[pname]
            if annotation is ToolContext:
                self.context_param = pname
                continue
            schema = json_schema_for(annotation)
            if arg_docs.get(pname):
                schema = {**schema, "description": arg_docs[pname]}
            if param.default is param.empty:
                required.append(pname)
                fields[pname] = (annotation, ...)
            else:
                fields[pname] = (annotation, param.default)
                if param.default is None or isinstance(param.default, str | int | float | bool):
                    schema = {**schema, "default": param.default}
            properties[pname] = schema
        self.arguments_model: type[BaseModel] = create_model(
            f"{self.name}_arguments",
            __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=True),
            **fields,
        )
        self.spec = ToolSpec(
            function=FunctionSpec(
                name=self.name,
                description=self.description,
                parameters={"type": "object", "properties": properties, "required": required},
            )
        )

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check ``arguments`` against the signature; return them converted to the annotated types.

        Raises:
            ToolArgumentError: naming every argument that is missing, unexpected or mistyped.
        """
        if not isinstance(arguments, dict):
            kind = type(arguments).__name__
            raise ToolArgumentError(f"arguments must be a JSON object, got {kind}")
        try:
            model = self.arguments_model.model_validate(arguments)
        except ValidationError as exc:
            raise ToolArgumentError(format_validation_error(exc)) from None
        return {k: getattr(model, k) for k in type(model).model_fields}

    async def prepare(self) -> None:
        """Get ready to run (an MCP tool starts its server here): a start bounded by its own
        limit, so ``timeout`` bounds the call alone. A failure raises ``ToolError``."""

    async def invoke(self, arguments: dict[str, Any], context: ToolContext | None = None) -> str:
        """Validate ``arguments`` and run the tool; the result as the text the model will read.

        Sync functions run in a worker thread so that a slow one cannot stall the event loop.
        No timeout is applied here; the environment applies it.
        """
        kwargs = self.validate(arguments)
        if self.context_param is not None:
            if context is None:
                raise ToolError(f"tool {self.name!r} needs an episode context, and none was given")
            kwargs[self.context_param] = context
        if self.is_async:
            result = await self.fn(**kwargs)
        else:
            result = await asyncio.to_thread(self.fn, **kwargs)
        return render_result(result)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


def render_result(result: Any) -> str:
    """A tool's return value as text: strings unchanged, everything else as JSON when it can be."""
    if isinstance(result, str):
        return result
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    try:
        return json.dumps(result, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(result)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, timeout: float | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a ``Tool`` from a typed function, bare (``@tool``) or with options.

    Args:
        fn: The function (when used bare).
        name: The tool's name (default: the function's name).
        description: Overrides the docstring summary.
        timeout: Seconds this tool may run, overriding the environment's ``tool_timeout``.
    """
    if fn is not None:
        return Tool(fn, name=name, description=description, timeout=timeout)

    def deco(f: Callable[..., Any]) -> Tool:
        return Tool(f, name=name, description=description, timeout=timeout)

    return deco
