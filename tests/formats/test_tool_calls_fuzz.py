"""Fuzz the tool-call parsers: no model output, however broken, may raise out of them.

The 10,000-example run is marked slow (about a minute of CPU, almost all of it hypothesis
generating inputs); it runs in CI with the other slow tests.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajforge.formats.tool_calls import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    ParsedCompletion,
    format_tool_call,
    parse_openai_tool_calls,
    parse_tool_calls,
)
from trajforge.schema import ToolCall

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(max_size=6), inner, max_size=3),
    ),
    max_leaves=6,
)
finite_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10)
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
names = st.one_of(
    st.sampled_from(["calculator", "search", "open", "move", ""]), st.text(max_size=12)
)
payloads = st.one_of(
    st.fixed_dictionaries({"name": names, "arguments": json_values}),
    st.fixed_dictionaries({"name": names, "arguments": json_values.map(lambda v: json.dumps(v))}),
    st.fixed_dictionaries({"name": json_values, "parameters": json_values}),
    json_values,
)
fragments = st.one_of(
    st.sampled_from(
        [
            TOOL_CALL_OPEN,
            TOOL_CALL_CLOSE,
            "<tool_call",
            "</tool_call",
            "{",
            "}",
            "[",
            "]",
            '"',
            ":",
            ",",
            '"name"',
            '"arguments"',
            '"arguments": "{',
            "\\",
            "\n",
            "null",
            "NaN",
            "-Infinity",
            "1e999",
            "9" * 5000,
            "[" * 3000,
            '{"a":' * 1000,
            "\ud800",
            "\x00",
        ]
    ),
    payloads.map(json.dumps),
    payloads.map(lambda p: json.dumps(p)[: len(json.dumps(p)) // 2]),
    st.text(max_size=12),
)
texts = st.lists(fragments, max_size=8).map("".join)
python_junk = st.one_of(
    st.tuples(json_values, json_values),
    st.dictionaries(st.integers(), json_values, max_size=3),
    st.builds(object),
    st.binary(max_size=8),
)
structured_items = st.one_of(
    st.fixed_dictionaries(
        {"id": json_values, "type": st.just("function"), "function": payloads},
    ),
    st.fixed_dictionaries(
        {"function": st.fixed_dictionaries({"name": names, "arguments": python_junk})}
    ),
    payloads,
    python_junk,
)
structured = st.one_of(st.lists(structured_items, max_size=5), json_values, python_junk)


def check_calls(calls: list[ToolCall], prefix: str | None) -> None:
    assert all(isinstance(c, ToolCall) for c in calls)
    for k, call in enumerate(calls):
        if prefix is not None:
            assert call.id == f"{prefix}_{k}"
        if call.parse_error is None:
            assert call.name.strip() and isinstance(call.arguments, dict)
        else:
            assert call.raw is not None


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(texts.map(lambda t: ("text", t)), structured.map(lambda s: ("openai", s))))
def test_no_input_raises_out_of_either_parser(case: tuple[str, Any]) -> None:
    kind, value = case
    if kind == "text":
        parsed = parse_tool_calls(value, id_prefix="call_3")
        assert isinstance(parsed, ParsedCompletion) and isinstance(parsed.content, str)
        check_calls(parsed.tool_calls, "call_3")
        opens = value.count(TOOL_CALL_OPEN)
        assert (len(parsed.tool_calls) == 0) == (opens == 0)
        assert len(parsed.tool_calls) <= opens
    else:
        calls = parse_openai_tool_calls(value, id_prefix="call_1")
        check_calls(calls, None)
        assert len({c.id for c in calls}) <= len(calls)


@settings(max_examples=200, deadline=None)
@given(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True),
    st.dictionaries(st.text(max_size=8), finite_values, max_size=4),
    st.text(max_size=20).filter(
        lambda s: TOOL_CALL_OPEN not in s and not s.strip().endswith("<tool_call")
    ),
)
def test_formatted_calls_round_trip(name: str, arguments: dict[str, Any], prose: str) -> None:
    parsed = parse_tool_calls(prose + format_tool_call(name, arguments), id_prefix="call_0")
    assert [(c.name, c.arguments, c.parse_error) for c in parsed.tool_calls] == [
        (name, arguments, None)
    ]
    assert parsed.content == prose.strip()
