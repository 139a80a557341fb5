"""The GUI action vocabulary every GUI environment shares: typed actions, their tool specs and
one parser from a tool call to an action.

Two kinds of agent act on a GUI. A page-tree agent names elements by the ids its observation
gives (``click``, ``fill``, ``select``, ``press``/``scroll`` on an element); a pixel agent sees a
screenshot and acts by coordinates (``click_at``, ``type_text``, ``press``, ``scroll``). Both end
with ``done``. An environment offers a subset (``PAGE_ACTIONS``, ``PIXEL_ACTIONS`` or its own
choice): ``action_specs(names)`` gives the tools it declares, and ``parse_action(call, names)``
turns the model's call into a typed action or raises ``ActionError`` with one line saying what
is wrong, e.g. ``click_at: y must be an integer, got 'abc'``.

Argument types are strict: JSON that carries ``"12"`` where an integer belongs is refused, so
that what a trajectory records is exactly what was acted on.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trajforge.envs.tool import ToolError, json_schema_for
from trajforge.schema import FunctionSpec, ToolCall, ToolSpec


class ActionError(ToolError):
    """A tool call that is not a valid GUI action: unknown, malformed, or with bad arguments.
    Its message is one line the model reads verbatim."""


class Action(BaseModel):
    """One GUI action. ``name`` is the tool name the model calls it by."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: ClassVar[str]
    description: ClassVar[str]

    def arguments(self) -> dict[str, Any]:
        """The tool-call arguments that parse back to this action (unset optionals left out)."""
        return self.model_dump(exclude_none=True)


ElementId = str
"""An element's id as the page-tree observation shows it."""


class Click(Action):
    name = "click"
    description = "Click the element with this id."
    element: ElementId = Field(min_length=1, description="The element's id.")


class Fill(Action):
    name = "fill"
    description = "Clear the text field with this id and type text into it."
    element: ElementId = Field(min_length=1, description="The text field's id.")
    text: str = Field(description="The text to enter.")


class Select(Action):
    name = "select"
    description = "Choose an option of the drop-down list with this id."
    element: ElementId = Field(min_length=1, description="The list's id.")
    option: str = Field(description="The option's visible text.")


class Press(Action):
    name = "press"
    description = "Press a key (Enter, Tab, Escape, Backspace, ArrowDown, a letter...)."
    key: str = Field(min_length=1, description="The key's name, e.g. Enter.")
    element: ElementId | None = Field(
        default=None, description="The element to focus first (default: the focused one)."
    )


class Scroll(Action):
    name = "scroll"
    description = "Scroll by dx, dy pixels (positive dy scrolls down)."
    dx: int = Field(description="Pixels to the right (negative: left).")
    dy: int = Field(description="Pixels down (negative: up).")
    element: ElementId | None = Field(
        default=None, description="The element to scroll (default: the page)."
    )


class ClickAt(Action):
    name = "click_at"
    description = "Click the screen at pixel (x, y); (0, 0) is the top-left corner."
    x: int = Field(description="Pixels from the left edge.")
    y: int = Field(description="Pixels from the top edge.")


class TypeText(Action):
    name = "type_text"
    description = "Type text with the keyboard into whatever has the focus."
    text: str = Field(description="The text to type.")


class Done(Action):
    name = "done"
    description = "Say the task is finished, with the answer when the task asks for one."
    answer: str | None = Field(default=None, description="The answer, if the task asks one.")


GuiAction = Click | Fill | Select | Press | Scroll | ClickAt | TypeText | Done
"""Any GUI action."""

ACTIONS: dict[str, type[Action]] = {
    cls.name: cls for cls in (Click, Fill, Select, Press, Scroll, ClickAt, TypeText, Done)
}
"""Every action class by its tool name."""

PAGE_ACTIONS: tuple[str, ...] = ("click", "fill", "select", "press", "scroll", "done")
"""What a page-tree agent acts with: element ids."""

PIXEL_ACTIONS: tuple[str, ...] = ("click_at", "type_text", "press", "scroll", "done")
"""What a pixel agent acts with: coordinates and the keyboard."""


def _check_names(names: Collection[str]) -> None:
    unknown = [n for n in names if n not in ACTIONS]
    if unknown:
        raise ValueError(
            f"GUI actions: unknown {', '.join(map(repr, unknown))}; known: {', '.join(ACTIONS)}"
        )


def action_spec(cls: type[Action]) -> ToolSpec:
    """The OpenAI function spec of one action."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field_name, info in cls.model_fields.items():
        schema = json_schema_for(info.annotation)
        if info.description:
            schema["description"] = info.description
        if info.is_required():
            required.append(field_name)
        else:
            schema["default"] = info.default
        properties[field_name] = schema
    parameters = {"type": "object", "properties": properties, "required": required}
    return ToolSpec(
        function=FunctionSpec(name=cls.name, description=cls.description, parameters=parameters)
    )


def action_specs(names: Collection[str] = tuple(ACTIONS)) -> list[ToolSpec]:
    """The tool specs of the actions ``names``, in that order.

    Raises:
        ValueError: a name is not a GUI action.
    """
    _check_names(names)
    return [action_spec(ACTIONS[n]) for n in names]


_KINDS = {
    "int_type": "an integer",
    "string_type": "a string",
    "bool_type": "a boolean",
    "none_required": "null",
}


def _problem(err: Any) -> str:
    field = ".".join(str(p) for p in err["loc"]) or "arguments"
    kind = err["type"]
    if kind == "missing":
        return f"missing argument {field}"
    if kind == "extra_forbidden":
        return f"unexpected argument {field}"
    got = err.get("input")
    shown = repr(got) if isinstance(got, str) else json.dumps(got, default=repr)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    if kind in _KINDS:
        return f"{field} must be {_KINDS[kind]}, got {shown}"
    if kind == "string_too_short":
        return f"{field} must not be empty"
    return f"{field}: {err['msg']}, got {shown}"


def _problems(exc: ValidationError) -> str:
    # An optional argument's union reports one error per member; the first says it.
    seen: dict[str, str] = {}
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if isinstance(p, str) and p.isidentifier())
        seen.setdefault(".".join(loc), _problem({**err, "loc": loc}))
    return "; ".join(seen.values())


def parse_arguments(
    name: str, arguments: Mapping[str, Any] | str, offered: Collection[str] = tuple(ACTIONS)
) -> GuiAction:
    """The action ``name`` called with ``arguments`` (a mapping, or its JSON text).

    Raises:
        ActionError: the action is not offered, the JSON is malformed, or an argument is
            missing, unexpected or of the wrong type (one line naming each).
    """
    if name not in offered:
        raise ActionError(f"unknown action {name!r}; available: {', '.join(offered)}")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ActionError(
                f"{name}: arguments are not valid JSON ({exc.msg} at char {exc.pos})"
            ) from None
    if not isinstance(arguments, Mapping):
        raise ActionError(
            f"{name}: arguments must be a JSON object, got {type(arguments).__name__}"
        )
    try:
        action: GuiAction = ACTIONS[name].model_validate(dict(arguments))  # type: ignore[assignment]
    except ValidationError as exc:
        raise ActionError(f"{name}: {_problems(exc)}") from None
    return action


def parse_action(call: ToolCall, offered: Collection[str] = tuple(ACTIONS)) -> GuiAction:
    """The typed action a tool call asks for.

    Raises:
        ActionError: one line: the call could not be parsed (malformed JSON), names an action
            not offered, or has bad arguments.
    """
    if call.parse_error:
        raise ActionError(f"malformed tool call: {call.parse_error}")
    return parse_arguments(call.name, call.arguments, offered)
