"""The battery of conversation shapes a chat template is checked with.

Each shape is a whole conversation in the form chat templates take (OpenAI chat dicts, tool
call arguments as objects, reasoning under ``reasoning_content``), built to expose one way a
template renders an earlier turn differently once later turns exist: a default system prompt,
tool-call syntax, several turns, empty and whitespace content, reasoning kept only on the last
turn, parallel calls.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trajforge.errors import ConfigError

ChatDict = dict[str, Any]


class ShapeName(StrEnum):
    SINGLE_TURN = "single-turn"
    MULTI_TURN = "multi-turn"
    SYSTEM_MULTI_TURN = "system-multi-turn"
    TOOL_CALL = "tool-call"
    PARALLEL_CALLS = "parallel-calls"
    TOOLS_THEN_USER = "tools-then-user"
    EMPTY_CONTENT = "empty-content"
    WHITESPACE_CONTENT = "whitespace-content"
    REASONING = "reasoning"
    REASONING_TOOLS = "reasoning-tools"


class Shape(BaseModel):
    """One conversation to render turn by turn."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: ShapeName
    about: str
    messages: list[ChatDict]
    tools: list[ChatDict] = Field(default_factory=list)


WEATHER_TOOL: ChatDict = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city."}},
            "required": ["city"],
        },
    },
}


def _user(text: str) -> ChatDict:
    return {"role": "user", "content": text}


def _assistant(
    text: str, reasoning: str | None = None, calls: list[ChatDict] | None = None
) -> ChatDict:
    out: ChatDict = {"role": "assistant", "content": text}
    if reasoning is not None:
        out["reasoning_content"] = reasoning
    if calls:
        out["tool_calls"] = calls
    return out


def _chat(*exchanges: tuple[str, str]) -> list[ChatDict]:
    """User messages, each answered by a plain reply: ``(user text, reply text)`` pairs."""
    return [m for text, reply in exchanges for m in (_user(text), _assistant(reply))]


def _call(call_id: str, city: str) -> ChatDict:
    """A call; ids are nine alphanumeric characters, the strictest form templates demand
    (Mistral's)."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": city}},
    }


def _result(call_id: str, text: str) -> ChatDict:
    return {"role": "tool", "tool_call_id": call_id, "name": "get_weather", "content": text}


_SYSTEM: ChatDict = {"role": "system", "content": "You are a terse assistant."}

SHAPES: dict[ShapeName, Shape] = {
    s.name: s
    for s in (
        Shape(
            name=ShapeName.SINGLE_TURN,
            about="one user message, one reply",
            messages=_chat(("What is 2+2?", "4")),
        ),
        Shape(
            name=ShapeName.MULTI_TURN,
            about="three user turns, no system message (a default one may be added)",
            messages=_chat(("Hi.", "Hello!"), ("What is 2+2?", "4"), ("And 3+3?", "6")),
        ),
        Shape(
            name=ShapeName.SYSTEM_MULTI_TURN,
            about="a system message, then two user turns",
            messages=[_SYSTEM, *_chat(("Hi.", "Hello!"), ("Bye.", "Bye!"))],
        ),
        Shape(
            name=ShapeName.TOOL_CALL,
            about="a tool call, its result, a final answer",
            messages=[
                _SYSTEM,
                _user("Weather in Paris?"),
                _assistant("", calls=[_call("call00001", "Paris")]),
                _result("call00001", "18C, sunny"),
                _assistant("18C and sunny."),
            ],
            tools=[WEATHER_TOOL],
        ),
        Shape(
            name=ShapeName.PARALLEL_CALLS,
            about="two calls in one turn, two results",
            messages=[
                _user("Weather in Paris and Rome?"),
                _assistant("", calls=[_call("call00001", "Paris"), _call("call00002", "Rome")]),
                _result("call00001", "18C"),
                _result("call00002", "24C"),
                _assistant("Paris 18C, Rome 24C."),
            ],
            tools=[WEATHER_TOOL],
        ),
        Shape(
            name=ShapeName.TOOLS_THEN_USER,
            about="a tool turn, an answer, then a new user turn",
            messages=[
                _user("Weather in Oslo?"),
                _assistant("Checking.", calls=[_call("call00001", "Oslo")]),
                _result("call00001", "-3C"),
                _assistant("-3C."),
                _user("Thanks."),
                _assistant("You're welcome."),
            ],
            tools=[WEATHER_TOOL],
        ),
        Shape(
            name=ShapeName.EMPTY_CONTENT,
            about="an empty reply and an empty user message",
            messages=_chat(("Say nothing.", ""), ("", "ok")),
        ),
        Shape(
            name=ShapeName.WHITESPACE_CONTENT,
            about="leading and trailing spaces and newlines in content",
            messages=_chat(("  padded \n", " spaced answer \n\n"), ("\n", "\tok ")),
        ),
        Shape(
            name=ShapeName.REASONING,
            about="replies with reasoning, across two user turns",
            messages=[
                _user("What is 2+2?"),
                _assistant("4", reasoning="Two plus two is four."),
                _user("Times 3?"),
                _assistant("12", reasoning="Four times three is twelve."),
            ],
        ),
        Shape(
            name=ShapeName.REASONING_TOOLS,
            about="reasoning before a tool call and before the answer",
            messages=[
                _user("Weather in Lima?"),
                _assistant(
                    "", reasoning="I should look it up.", calls=[_call("call00001", "Lima")]
                ),
                _result("call00001", "20C"),
                _assistant("20C.", reasoning="The tool said 20C."),
            ],
            tools=[WEATHER_TOOL],
        ),
    )
}


def shapes_named(names: list[str]) -> list[Shape]:
    """The shapes called ``names`` (the whole battery for none)."""
    if not names:
        return list(SHAPES.values())
    known = {s.value for s in ShapeName}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(
            f"--shape: {', '.join(unknown)} not among the shapes ({', '.join(sorted(known))})"
        )
    return [SHAPES[ShapeName(n)] for n in dict.fromkeys(names)]
