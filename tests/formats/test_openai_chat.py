"""OpenAI chat-completions conversion: round trip and the awkward inputs real datasets contain."""

from __future__ import annotations

import json

import pytest

from trajforge.errors import DataError
from trajforge.formats.openai_chat import from_openai_chat, to_openai_chat
from trajforge.schema import Role
from trajforge.schema.synthetic import synthetic_trajectory


def test_round_trip_keeps_conversation_and_tools() -> None:
    traj = synthetic_trajectory(3)
    data = to_openai_chat(traj)
    call = data["messages"][2]["tool_calls"][0]
    assert call["type"] == "function"
    assert json.loads(call["function"]["arguments"]) == traj.messages[2].tool_calls[0].arguments
    assert data["messages"][3] == {
        "role": "tool",
        "content": traj.messages[3].content,
        "tool_call_id": "call_0_0",
        "name": "calculator",
    }
    assert "token_ids" not in json.dumps(data)

    back = from_openai_chat(json.loads(json.dumps(data)), task=traj.task, run_id="r")
    assert back.tools == traj.tools
    assert back.run_id == "r"
    assert [
        m.model_dump(include={"role", "content", "tool_calls", "tool_call_id", "name"})
        for m in back.messages
    ] == [
        m.model_dump(include={"role", "content", "tool_calls", "tool_call_id", "name"})
        for m in traj.messages
    ]
    assert to_openai_chat(back) == data


def test_default_task_is_the_first_user_message() -> None:
    traj = from_openai_chat(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}],
                },
                {"role": "assistant", "content": None},
            ]
        }
    )
    assert traj.task.prompt == "hi there"
    assert traj.messages[1].content == ""


def test_unparsable_arguments_become_a_parse_error_and_survive_the_round_trip() -> None:
    data = {
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{broken"},
                    },
                    {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "[1]"}},
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "bad arguments"},
            {"role": "tool", "tool_call_id": "c2", "content": "bad arguments"},
        ]
    }
    traj = from_openai_chat(data)
    first, second = traj.messages[1].tool_calls
    assert (
        first.raw == "{broken" and first.parse_error is not None and "not JSON" in first.parse_error
    )
    assert second.parse_error == "arguments are not a JSON object"
    assert (
        to_openai_chat(traj)["messages"][1]["tool_calls"][0]["function"]["arguments"] == "{broken"
    )
    assert traj.messages[2].role is Role.TOOL


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ([{"role": "robot", "content": "x"}], r"^messages\.0: role: "),
        (
            [{"role": "user", "content": [{"type": "input_audio"}]}],
            r"messages\.0\.content\.0: only text and image_url parts are supported, not 'input",
        ),
        (
            [{"role": "user", "content": [{"type": "image_url"}]}],
            r"messages\.0\.content\.0\.image_url: expected \{'url'",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}],
                },
            ],
            r"messages: tool call\(s\) c1 were never answered",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]},
            ],
            r"messages\.1\.tool_calls\.0\.id: a tool call needs an id",
        ),
    ],
)
def test_bad_records_name_the_field(messages: list[dict[str, object]], match: str) -> None:
    with pytest.raises(DataError, match=match):
        from_openai_chat({"messages": messages})
