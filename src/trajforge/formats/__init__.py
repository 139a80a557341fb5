from typing import TYPE_CHECKING

from trajforge.registry import lazy_names

if TYPE_CHECKING:
    from trajforge.formats.detect import detect_format, likely_format, readable, writable
    from trajforge.formats.images import content_to_openai
    from trajforge.formats.jsonl import (
        load_trajectories,
        read_json_objects,
        write_jsonl_lines,
        write_trajectories,
    )
    from trajforge.formats.openai_chat import content_text, message_to_openai, messages_from_openai
    from trajforge.formats.otel_receiver import TraceCollector, receiver_app
    from trajforge.formats.records import (
        FORMATS,
        RecordFormat,
        load_records,
        paused_gc,
        write_pair_records,
        write_records,
    )
    from trajforge.formats.responses import messages_from_responses, namespaced
    from trajforge.formats.tool_calls import (
        TOOL_CALL_CLOSE,
        TOOL_CALL_OPEN,
        ParsedCompletion,
        format_tool_call,
        get_parser,
        parse_openai_tool_calls,
        parse_tool_calls,
    )

__all__ = [
    "FORMATS",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "ParsedCompletion",
    "RecordFormat",
    "TraceCollector",
    "content_text",
    "content_to_openai",
    "detect_format",
    "format_tool_call",
    "get_parser",
    "likely_format",
    "load_records",
    "load_trajectories",
    "message_to_openai",
    "messages_from_openai",
    "messages_from_responses",
    "namespaced",
    "parse_openai_tool_calls",
    "parse_tool_calls",
    "paused_gc",
    "read_json_objects",
    "readable",
    "receiver_app",
    "writable",
    "write_jsonl_lines",
    "write_pair_records",
    "write_records",
    "write_trajectories",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "FORMATS": "records",
        "ParsedCompletion": "tool_calls",
        "RecordFormat": "records",
        "TOOL_CALL_CLOSE": "tool_calls",
        "TOOL_CALL_OPEN": "tool_calls",
        "TraceCollector": "otel_receiver",
        "content_text": "openai_chat",
        "content_to_openai": "images",
        "detect_format": "detect",
        "format_tool_call": "tool_calls",
        "get_parser": "tool_calls",
        "likely_format": "detect",
        "load_records": "records",
        "load_trajectories": "jsonl",
        "message_to_openai": "openai_chat",
        "messages_from_openai": "openai_chat",
        "messages_from_responses": "responses",
        "namespaced": "responses",
        "parse_openai_tool_calls": "tool_calls",
        "parse_tool_calls": "tool_calls",
        "paused_gc": "records",
        "read_json_objects": "jsonl",
        "readable": "detect",
        "receiver_app": "otel_receiver",
        "writable": "detect",
        "write_jsonl_lines": "jsonl",
        "write_pair_records": "records",
        "write_records": "records",
        "write_trajectories": "jsonl",
    },
)
