"""The tool-call parser registry: the text protocol is built in, more register by name."""

from __future__ import annotations

import pytest

from trajforge.errors import ConfigError
from trajforge.formats.tool_calls import PARSERS, ParsedCompletion, get_parser, parse_tool_calls


def test_text_parser_is_registered_and_unknown_names_are_config_errors() -> None:
    assert "text" in PARSERS
    with pytest.raises(
        ConfigError, match=r"^unknown tool-call parser 'txt' \(did you mean 'text'\?\)"
    ):
        get_parser("txt")


def test_a_registered_parser_is_used_by_name() -> None:
    @PARSERS.register("upper_for_test")
    def upper(text: str, id_prefix: str) -> ParsedCompletion:
        return ParsedCompletion(content=text.upper())

    assert parse_tool_calls("hi", parser="upper_for_test").content == "HI"
