"""Agent loops written with the official ``anthropic`` SDK against ``trajforge serve``'s
Messages API: one token-exact trajectory per run, streamed or not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from anthropic import Anthropic
from serve_helpers import ADD_TOOL, MODEL, add, assert_token_exact, recorded

from trajforge.formats.tool_calls import format_tool_call
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.schema import OutcomeStatus, Role
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving
from trajforge.store import TrajectoryStore

SCHEMA = ADD_TOOL["function"]["parameters"]
TOOL = {
    "name": "add",
    "description": "Add two integers.",
    "input_schema": SCHEMA,
    "cache_control": {"type": "ephemeral"},  # what harnesses add: accepted, changes nothing
}
SYSTEM = [{"type": "text", "text": "You add numbers with the add tool.",
           "cache_control": {"type": "ephemeral"}}]  # fmt: skip


def client(base_url: str, session: str) -> Anthropic:
    return Anthropic(base_url=f"{base_url}/sessions/{session}", api_key="dummy", max_retries=0)


def tool_results(content: list[Any]) -> list[dict[str, Any]]:
    return [
        {"type": "tool_result", "tool_use_id": b.id, "content": add(json.dumps(b.input))}
        for b in content
        if b.type == "tool_use"
    ]


def run_agent(
    sdk: Anthropic, question: str, stream: bool = False
) -> tuple[list[Any], list[dict[str, Any]]]:
    """The SDK's tool loop: the replies, and the conversation as the client last sent it."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    replies = []
    while True:
        asked: dict[str, Any] = {"model": MODEL, "max_tokens": 200, "system": SYSTEM,
                                 "tools": [TOOL], "messages": messages}  # fmt: skip
        if stream:
            with sdk.messages.stream(**asked) as events:
                reply = events.get_final_message()
        else:
            reply = sdk.messages.create(**asked)
        replies.append(reply)
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        if reply.stop_reason != "tool_use":
            return replies, messages
        messages.append({"role": "user", "content": tool_results(reply.content)})


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_loop_is_one_token_exact_trajectory(
    base_url: str, store_path: Path, stream: bool
) -> None:
    replies, _ = run_agent(client(base_url, "run-1"), "What is 3 plus 4 plus 5?", stream)
    assert [r.stop_reason for r in replies] == ["tool_use", "tool_use", "end_turn"]
    first = replies[0].content[0]
    assert first.type == "tool_use" and first.id.startswith("toolu_")
    assert first.name == "add" and first.input == {"a": 3, "b": 4}
    assert replies[-1].content[0].type == "text"
    assert replies[-1].content[0].text == "The total is 12."
    (traj,) = recorded(store_path)
    assert traj.outcome.status is OutcomeStatus.OK and traj.num_turns == 3
    roles = [m.role for m in traj.messages]
    assert roles == [Role.SYSTEM, Role.USER] + [Role.ASSISTANT, Role.TOOL] * 2 + [Role.ASSISTANT]
    assert traj.messages[0].content == SYSTEM[0]["text"]
    assert traj.tools[0].function.name == "add" and traj.tools[0].function.parameters == SCHEMA
    client_info = traj.metadata["gateway"]["client"]
    assert client_info["name"] == "Anthropic/Python"
    assert client_info["version"] == anthropic.__version__
    assert [r.usage.input_tokens for r in replies] == sorted(
        {r.usage.input_tokens for r in replies}
    )
    assert sum(r.usage.output_tokens for r in replies) == traj.usage.completion_tokens
    assert_token_exact(store_path)


def test_count_tokens_is_the_prompt_each_call_is_given(base_url: str, store_path: Path) -> None:
    sdk = client(base_url, "count")
    replies, messages = run_agent(sdk, "What is 1 plus 2 plus 3?")
    counts = []
    for k in range(len(replies)):
        sent = messages[: 2 * k + 1]
        counted = sdk.messages.count_tokens(model=MODEL, system=SYSTEM, tools=[TOOL], messages=sent)
        counts.append(counted.input_tokens)
    assert counts == [r.usage.input_tokens for r in replies]
    (traj,) = recorded(store_path)
    prompts = [sum(len(m.token_ids or []) for m in traj.messages[:k])
               for k, m in enumerate(traj.messages) if m.role is Role.ASSISTANT]  # fmt: skip
    assert counts == prompts
    assert len(recorded(store_path)) == 1  # counting records nothing


def test_the_sdk_lists_and_retrieves_the_served_model(base_url: str) -> None:
    sdk = client(base_url, "models")
    (model,) = sdk.models.list().data
    assert model.id == MODEL and model.type == "model"
    assert sdk.models.retrieve(MODEL).id == MODEL
    with pytest.raises(anthropic.NotFoundError):
        sdk.models.retrieve("claude-nope")


def test_system_messages_thinking_and_a_bearer_token_are_taken(
    base_url: str, store_path: Path
) -> None:
    sdk = Anthropic(base_url=f"{base_url}/sessions/t", auth_token="dummy", max_retries=0)
    messages: list[Any] = [
        {"role": "system", "content": "Mind the sign."},
        {"role": "user", "content": [{"type": "text", "text": "What is 2 plus 2?"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I will add.", "signature": "sig"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "Adding."},
            {"type": "tool_use", "id": "toolu_01A", "name": "add", "input": {"a": 2, "b": 2}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01A", "is_error": False,
             "content": [{"type": "text", "text": '{"sum": 4}'}]},
        ]},
    ]  # fmt: skip
    reply = sdk.messages.create(model=MODEL, max_tokens=50, system="Be exact.", messages=messages)
    assert reply.stop_reason == "end_turn" and reply.content[0].text == "The total is 4."
    (traj,) = recorded(store_path)
    system, mid, user, assistant, tool, _ = traj.messages
    assert (system.content, mid.content) == ("Be exact.", "Mind the sign.")
    assert assistant.reasoning == "I will add." and assistant.content == "Adding."
    assert assistant.tool_calls[0].id == tool.tool_call_id
    assert tool.content == '{"sum": 4}' and user.role is Role.USER


STREAMED = "Let me add these.\n" + format_tool_call("add", {"a": 2, "b": 3})


@pytest.fixture
def streamed_url(store_path: Path) -> Iterator[str]:
    policy = ScriptedPolicy([STREAMED], load_tokenizer(), name=MODEL)
    store = TrajectoryStore(store_path)
    with serving(Gateway(policy, store, run_id="gw")) as url:
        yield url
    store.close()


def test_streamed_events_come_in_the_apis_order(streamed_url: str, store_path: Path) -> None:
    call = {"model": MODEL, "max_tokens": 100, "stream": True, "tools": [TOOL],
            "messages": [{"role": "user", "content": "2 + 3?"}]}  # fmt: skip
    events = []
    with httpx.stream("POST", f"{streamed_url}/v1/messages", json=call, timeout=30) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        kind = ""
        for line in reply.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = json.loads(line.removeprefix("data: "))
                assert data["type"] == kind
                events.append(data)
    kinds = [e["type"] for e in events]
    texts = [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"
             and e["delta"]["type"] == "text_delta"]  # fmt: skip
    assert kinds[:4] == ["message_start", "ping", "content_block_start", "content_block_delta"]
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert "".join(texts) == "Let me add these." and len(texts) > 1
    assert not any("<" in t for t in texts)
    starts = [e for e in events if e["type"] == "content_block_start"]
    assert [(s["index"], s["content_block"]["type"]) for s in starts] == [
        (0, "text"),
        (1, "tool_use"),
    ]
    assert starts[1]["content_block"]["input"] == {}
    (json_delta,) = [
        e["delta"] for e in events if e.get("index") == 1 and e["type"] == "content_block_delta"
    ]
    assert json_delta == {"type": "input_json_delta", "partial_json": '{"a": 2, "b": 3}'}
    tool_events = [e["type"] for e in events if e.get("index") == 1]
    assert tool_events == ["content_block_start", "content_block_delta", "content_block_stop"]
    assert kinds.index("content_block_stop") < kinds.index("content_block_start", 3)
    final = events[-2]
    assert final["delta"]["stop_reason"] == "tool_use"
    assert final["usage"]["input_tokens"] > 0 and final["usage"]["output_tokens"] > 0
    assert events[0]["message"]["usage"]["input_tokens"] == final["usage"]["input_tokens"]
    (traj,) = recorded(store_path)
    assert traj.messages[-1].content == "Let me add these."
    assert_token_exact(store_path)


@pytest.fixture
def tiny(tiny_url: str) -> Anthropic:
    return Anthropic(base_url=tiny_url, api_key="dummy", max_retries=0)


def test_a_model_streams_token_by_token_the_reply_it_samples_whole(
    tiny: Anthropic, store_path: Path
) -> None:
    # One seed (the gateway's extension), so both calls sample the same reply.
    asked: dict[str, Any] = {"model": "tiny", "max_tokens": 24, "extra_body": {"seed": 7},
                             "messages": [{"role": "user", "content": "Tell me a story."}]}  # fmt: skip
    whole = tiny.messages.create(**asked)
    with tiny.messages.stream(**asked) as stream:
        deltas = list(stream.text_stream)
        streamed = stream.get_final_message()
    text = whole.content[0].text
    assert "".join(deltas) == text == streamed.content[0].text
    assert len(deltas) > whole.usage.output_tokens // 2
    assert streamed.usage.input_tokens == whole.usage.input_tokens > 0
    assert whole.stop_reason == streamed.stop_reason == "max_tokens"
    first, second = recorded(store_path)
    assert [m.token_ids for m in first.messages] == [m.token_ids for m in second.messages]
    assert first.outcome.status is OutcomeStatus.TRUNCATED
    assert_token_exact(store_path)


def test_a_stop_sequence_sampled_is_named(base_url: str) -> None:
    sdk = client(base_url, "stops")
    reply = sdk.messages.create(
        model=MODEL, max_tokens=50, stop_sequences=["never", "total"],
        messages=[{"role": "user", "content": "What is 7?"}],
    )  # fmt: skip
    assert reply.stop_reason == "stop_sequence" and reply.stop_sequence == "total"
