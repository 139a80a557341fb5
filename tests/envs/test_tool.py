"""@tool: schema from signature and docstring, argument validation with precise messages."""

from __future__ import annotations

import asyncio
import enum
from typing import Literal, Optional

import pytest

from trajforge.envs.tool import (
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolDefinitionError,
    parse_docstring,
    tool,
)
from trajforge.schema import Task


class Color(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


@tool
def lookup(
    query: str,
    limit: int = 5,
    mode: Literal["fast", "exact"] = "fast",
    tags: list[str] | None = None,
    weight: Optional[float] = None,  # noqa: UP045 - the Optional spelling must work too
    color: Color = Color.RED,
    flags: dict[str, bool] | None = None,
) -> str:
    """Look things up in the index.

    More detail that is not part of the summary.

    Args:
        query: What to look for; may span
            two lines.
        limit (int): At most this many results.
        mode: How to match.

    Returns:
        The matches, one per line.
    """
    return f"{query}:{limit}:{mode}:{tags}:{weight}:{color}:{flags}"


def test_spec_has_openai_shape_types_descriptions_and_required() -> None:
    spec = lookup.spec.to_openai()
    assert spec["type"] == "function"
    fn = spec["function"]
    assert fn["name"] == "lookup"
    assert fn["description"] == "Look things up in the index."
    params = fn["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["query"]
    props = params["properties"]
    assert props["query"] == {
        "type": "string",
        "description": "What to look for; may span two lines.",
    }
    assert props["limit"] == {
        "type": "integer",
        "description": "At most this many results.",
        "default": 5,
    }
    assert props["mode"] == {
        "type": "string",
        "enum": ["fast", "exact"],
        "description": "How to match.",
        "default": "fast",
    }
    assert props["tags"] == {
        "type": ["array", "null"],
        "items": {"type": "string"},
        "default": None,
    }
    assert props["weight"] == {"type": ["number", "null"], "default": None}
    assert props["color"] == {"type": "string", "enum": ["red", "blue"], "default": "red"}
    assert props["flags"] == {
        "type": ["object", "null"],
        "additionalProperties": {"type": "boolean"},
        "default": None,
    }


def test_options_override_name_description_and_set_timeout() -> None:
    @tool(name="renamed", description="Custom.", timeout=1.5)
    async def original(x: int) -> int:
        """Ignored summary."""
        return x

    assert isinstance(original, Tool)
    assert original.name == "renamed"
    assert original.spec.function.description == "Custom."
    assert original.timeout == 1.5
    assert original.is_async


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"query": "q", "limit": "abc"}, "argument 'limit': expected integer, got 'abc'"),
        ({}, "missing required argument 'query'"),
        ({"query": "q", "foo": 1}, "unexpected argument 'foo'"),
        ({"query": "q", "mode": "slow"}, "argument 'mode': expected 'fast' or 'exact', got 'slow'"),
        ({"query": "q", "tags": ["a", 3]}, "argument 'tags[1]': expected string, got 3"),
        ({"query": "q", "limit": 2.5}, "argument 'limit': expected integer, got 2.5"),
        ({"query": ["x"]}, "argument 'query': expected string, got [\"x\"]"),
        (
            {"query": "q", "color": "green"},
            "argument 'color': expected 'red' or 'blue', got 'green'",
        ),
    ],
)
def test_bad_arguments_are_named_precisely(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ToolArgumentError) as err:
        lookup.validate(arguments)
    assert str(err.value) == message


def test_several_problems_are_all_reported() -> None:
    with pytest.raises(ToolArgumentError) as err:
        lookup.validate({"limit": "x", "bogus": 1})
    text = str(err.value)
    assert "missing required argument 'query'" in text
    assert "argument 'limit': expected integer, got 'x'" in text
    assert "unexpected argument 'bogus'" in text


def test_non_object_arguments_are_refused() -> None:
    with pytest.raises(ToolArgumentError, match="arguments must be a JSON object, got list"):
        lookup.validate([1, 2])  # type: ignore[arg-type]


def test_valid_arguments_are_converted_and_defaults_filled() -> None:
    assert lookup.validate({"query": "q", "limit": "7", "color": "blue"}) == {
        "query": "q",
        "limit": 7,
        "mode": "fast",
        "tags": None,
        "weight": None,
        "color": Color.BLUE,
        "flags": None,
    }


def test_invoke_runs_sync_and_async_tools_and_renders_results() -> None:
    @tool
    async def pair(a: int, b: int) -> dict[str, int]:
        """Pair two numbers."""
        return {"a": a, "b": b}

    assert asyncio.run(lookup.invoke({"query": "q", "limit": 1})) == "q:1:fast:None:None:red:None"
    assert asyncio.run(pair.invoke({"a": 1, "b": "2"})) == '{"a": 1, "b": 2}'
    assert lookup("direct") == "direct:5:fast:None:None:red:None"


def test_context_parameter_is_injected_and_kept_out_of_the_schema() -> None:
    @tool
    def whoami(ctx: ToolContext, greeting: str = "hi") -> str:
        """Say which task this is."""
        return f"{greeting} {ctx.task.id}"

    assert whoami.spec.function.parameters["properties"].keys() == {"greeting"}
    context = ToolContext(task=Task(id="t1", prompt="p"))
    assert asyncio.run(whoami.invoke({}, context)) == "hi t1"
    with pytest.raises(ToolArgumentError, match="unexpected argument 'ctx'"):
        whoami.validate({"ctx": 1})


def test_functions_that_cannot_be_described_are_refused() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    def star(*args: int) -> int:
        return 0

    with pytest.raises(ToolDefinitionError, match="parameter 'x' has no type annotation"):
        tool(untyped)
    with pytest.raises(ToolDefinitionError, match=r"\*args"):
        tool(star)


def test_docstring_parser_handles_sections_and_types() -> None:
    summary, args = parse_docstring(
        """Summary line
        continues here.

        Args:
            a (int): First.
            b: Second, which
                wraps.

        Raises:
            ValueError: never an argument.
        """
    )
    assert summary == "Summary line continues here."
    assert args == {"a": "First.", "b": "Second, which wraps."}
