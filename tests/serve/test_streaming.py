"""Streamed replies (``stream=True``, the official ``openai`` SDK): text goes out as it is
sampled, tool calls never leak as text, and the streamed reply is the non-streamed one."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI
from serve_helpers import ADD_TOOL, MODEL, assert_token_exact, recorded

from trajforge.formats.tool_calls import format_tool_call
from trajforge.policy.base import Completion
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.policy.token_policy import TurnRequest
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving
from trajforge.store import TrajectoryStore

REPLY = "Let me add these.\n" + format_tool_call("add", {"a": 2, "b": 3})


class GatedPolicy(ScriptedPolicy):
    """Samples ``REPLY`` token by token and stops once its tool call opens, until the client
    has received text: a gateway that sent nothing before the whole reply would wait forever."""

    def __init__(self) -> None:
        super().__init__(lambda task, messages: REPLY, load_tokenizer(), name=MODEL)
        self.gate = threading.Event()
        self.opened_mid_reply = False

    async def complete(self, turn: TurnRequest) -> Completion:
        completion = await super().complete(replace(turn, on_token=None))
        on_token = turn.on_token
        assert on_token is not None  # a streamed call
        ids = completion.token_ids
        cut = next(k for k in range(len(ids)) if "<tool_call>" in self.renderer.decode(ids[:k]))
        for token in ids[:cut]:
            on_token(token)
        self.opened_mid_reply = await asyncio.to_thread(self.gate.wait, 30)
        for token in ids[cut:]:
            on_token(token)
        return completion


@pytest.fixture
def gated(store_path: Path) -> Iterator[tuple[OpenAI, GatedPolicy]]:
    policy = GatedPolicy()
    store = TrajectoryStore(store_path)
    with serving(Gateway(policy, store, run_id="gw")) as url:
        yield OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0), policy
    store.close()


def test_text_is_sent_while_the_reply_is_sampled_and_calls_never_as_text(
    gated: tuple[OpenAI, GatedPolicy], store_path: Path
) -> None:
    client, policy = gated
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "2 + 3?"}], tools=[ADD_TOOL], stream=True
    )
    texts: list[str] = []
    calls: list[Any] = []
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                texts.append(choice.delta.content)
                policy.gate.set()
            calls += choice.delta.tool_calls or []
            finish = choice.finish_reason or finish
    assert policy.opened_mid_reply
    assert "".join(texts) == "Let me add these." and len(texts) > 1
    assert not any("<" in t for t in texts)
    (call,) = calls
    assert call.function.name == "add" and call.function.arguments == '{"a": 2, "b": 3}'
    assert finish == "tool_calls"
    (traj,) = recorded(store_path)
    assert traj.messages[-1].content == "Let me add these."
    assert_token_exact(store_path)


def test_a_responses_stream_sends_text_while_sampling_and_the_call_after(
    gated: tuple[OpenAI, GatedPolicy], store_path: Path
) -> None:
    client, policy = gated
    tool = {"type": "function", **ADD_TOOL["function"]}
    deltas: list[str] = []
    kinds: list[str] = []
    final = None
    with client.responses.stream(model=MODEL, input="2 + 3?", tools=[tool]) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
                policy.gate.set()
        final = stream.get_final_response()
    assert policy.opened_mid_reply
    assert "".join(deltas) == "Let me add these." and len(deltas) > 1
    assert not any("<" in d for d in deltas)
    assert kinds.index("response.output_item.added") < kinds.index("response.output_text.delta")
    message, call = final.output
    assert message.type == "message" and call.type == "function_call"
    assert message.content[0].text == "Let me add these."
    assert call.arguments == '{"a": 2, "b": 3}'
    assert_token_exact(store_path)


def test_a_model_streams_token_by_token_the_reply_it_samples_whole(
    tiny: OpenAI, store_path: Path
) -> None:
    asked: dict[str, Any] = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Tell me a story."}],
        "max_tokens": 24,
        "seed": 7,
    }
    whole = tiny.chat.completions.create(**asked)
    chunks = [
        c.choices[0].delta.content
        for c in tiny.chat.completions.create(**asked, stream=True)
        if c.choices and c.choices[0].delta.content
    ]
    assert "".join(chunks) == whole.choices[0].message.content
    assert whole.usage is not None and len(chunks) > whole.usage.completion_tokens // 2
    first, second = recorded(store_path)
    assert [m.token_ids for m in first.messages] == [m.token_ids for m in second.messages]
    assert_token_exact(store_path)


def test_messages_continue_after_a_streamed_turn(tiny: OpenAI, store_path: Path) -> None:
    messages: list[Any] = [{"role": "user", "content": "Hi."}]
    for _ in range(2):
        stream = tiny.chat.completions.create(
            model="tiny", messages=messages, max_tokens=8, seed=1, stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "More."}]
    (traj,) = recorded(store_path)
    assert traj.num_turns == 2 and [m.role.value for m in traj.messages] == [
        m["role"] for m in messages[:-1]
    ]
    assert_token_exact(store_path)
