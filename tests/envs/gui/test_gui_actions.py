"""The GUI action vocabulary: tool specs per chosen subset, and one error line per bad call."""

from __future__ import annotations

from typing import Any

import pytest

from trajforge.envs.gui import (
    ACTIONS,
    PAGE_ACTIONS,
    PIXEL_ACTIONS,
    ActionError,
    Click,
    ClickAt,
    Done,
    Fill,
    Press,
    Scroll,
    Select,
    TypeText,
    action_specs,
    parse_action,
    parse_arguments,
)
from trajforge.schema import ToolCall


def test_the_vocabulary_has_exactly_the_agreed_names() -> None:
    assert list(ACTIONS) == [
        "click", "fill", "select", "press", "scroll", "click_at", "type_text", "done"
    ]  # fmt: skip
    assert set(PAGE_ACTIONS) | set(PIXEL_ACTIONS) == set(ACTIONS)


def test_specs_are_the_chosen_subset_with_json_schemas() -> None:
    specs = action_specs(PIXEL_ACTIONS)
    assert [s.name for s in specs] == list(PIXEL_ACTIONS)
    click_at = specs[0].function.parameters
    assert click_at["required"] == ["x", "y"]
    assert click_at["properties"]["x"]["type"] == "integer"
    press = specs[2].function.parameters
    assert press["required"] == ["key"]
    assert press["properties"]["element"]["type"] == ["string", "null"]
    assert press["properties"]["element"]["default"] is None
    assert action_specs(["done"])[0].function.parameters["required"] == []


def test_specs_refuse_an_unknown_name() -> None:
    with pytest.raises(ValueError, match="unknown 'drag'"):
        action_specs(["click", "drag"])


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("click", {"element": "12"}, Click(element="12")),
        ("fill", {"element": "a", "text": "hi"}, Fill(element="a", text="hi")),
        ("select", {"element": "s", "option": "Red"}, Select(element="s", option="Red")),
        ("press", {"key": "Enter"}, Press(key="Enter")),
        ("scroll", {"dx": 0, "dy": -40, "element": "7"}, Scroll(dx=0, dy=-40, element="7")),
        ("click_at", {"x": 3, "y": 4}, ClickAt(x=3, y=4)),
        ("type_text", {"text": "cat"}, TypeText(text="cat")),
        ("done", {}, Done()),
        ("done", '{"answer": "42"}', Done(answer="42")),
    ],
)
def test_good_calls_parse_to_typed_actions(name: str, arguments: Any, expected: Any) -> None:
    action = parse_arguments(name, arguments)
    assert action == expected
    assert parse_arguments(name, action.arguments()) == action


@pytest.mark.parametrize(
    ("name", "arguments", "line"),
    [
        ("click_at", {"x": 1, "y": "abc"}, "click_at: y must be an integer, got 'abc'"),
        ("click_at", {"x": 1, "y": "5"}, "click_at: y must be an integer, got '5'"),
        ("click_at", {"x": 1.5, "y": 2}, "click_at: x must be an integer, got 1.5"),
        ("click_at", {"x": 1}, "click_at: missing argument y"),
        ("click_at", {"x": 1, "y": 2, "z": 0}, "click_at: unexpected argument z"),
        ("type_text", {"text": 7}, "type_text: text must be a string, got 7"),
        ("press", {"key": "Enter", "element": 5}, "press: element must be a string, got 5"),
        ("press", {"key": ""}, "press: key must not be empty"),
        ("scroll", {"dx": True, "dy": 1}, "scroll: dx must be an integer, got true"),
        ("fill", {}, "fill: missing argument element; missing argument text"),
        (
            "click",
            '{"element": ',
            "click: arguments are not valid JSON (Expecting value at char 12)",
        ),
        ("click", "[1]", "click: arguments must be a JSON object, got list"),
        ("drag", {}, "unknown action 'drag'; available: " + ", ".join(ACTIONS)),
    ],
)
def test_bad_calls_raise_one_line(name: str, arguments: Any, line: str) -> None:
    with pytest.raises(ActionError) as caught:
        parse_arguments(name, arguments)
    assert str(caught.value) == line
    assert "\n" not in str(caught.value)


def test_an_action_the_env_does_not_offer_is_unknown_there() -> None:
    call = ToolCall(id="c1", name="click", arguments={"element": "3"})
    assert parse_action(call, PAGE_ACTIONS) == Click(element="3")
    with pytest.raises(ActionError, match=r"^unknown action 'click'; available: click_at, "):
        parse_action(call, PIXEL_ACTIONS)


def test_a_call_that_did_not_parse_is_one_line() -> None:
    call = ToolCall(id="c1", raw="<tool_call>{x", parse_error="invalid JSON: Expecting value")
    with pytest.raises(ActionError) as caught:
        parse_action(call)
    assert str(caught.value) == "malformed tool call: invalid JSON: Expecting value"
