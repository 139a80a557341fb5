"""Agent loops written with the official ``openai`` SDK against ``trajforge serve``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from serve_helpers import ADD_TOOL, MODEL, add, assert_token_exact, recorded, session_trajectories

from trajforge.formats.tool_calls import format_tool_call
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.schema import Message, OutcomeStatus, Role
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving
from trajforge.store import TrajectoryStore


def run_agent(client: OpenAI, question: str, **extra: Any) -> tuple[str, list[dict[str, Any]]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You add numbers with the add tool."},
        {"role": "user", "content": question},
    ]
    while True:
        reply = client.chat.completions.create(
            model=MODEL, messages=messages, tools=[ADD_TOOL], **extra
        )
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or "", messages
        for call in message.tool_calls:
            result = add(call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


def test_a_tool_loop_is_one_token_exact_trajectory(base_url: str, store_path: Path) -> None:
    client = OpenAI(base_url=f"{base_url}/sessions/run-1/v1", api_key="unused")
    answer, messages = run_agent(client, "What is 3 plus 4 plus 5 plus 6?", logprobs=True)
    assert answer == "The total is 18."
    (traj,) = recorded(store_path)
    assert traj.outcome.status is OutcomeStatus.OK and traj.num_turns == 4
    assert [m.role for m in traj.messages] == [Role(m["role"]) for m in messages]
    assert traj.metadata["gateway"]["session"] == "run-1" and traj.model == MODEL
    assert all(m.logprobs is not None for m in traj.messages if m.role is Role.ASSISTANT)
    assert traj.usage.turns == 4 and traj.usage.tool_calls == 3
    assert_token_exact(store_path)


def test_each_call_extends_the_previous_prompt_token_for_token(
    base_url: str, store_path: Path
) -> None:
    client = OpenAI(base_url=f"{base_url}/sessions/s/v1", api_key="unused")
    run_agent(client, "Add 1 and 2 and 3?")
    (traj,) = recorded(store_path)
    ids = [m.token_ids or [] for m in traj.messages]
    # Usage reports each call's prompt; the recorded context is those prompts plus replies.
    contexts = [sum(len(x) for x in ids[:k]) for k, m in enumerate(traj.messages)
                if m.role is Role.ASSISTANT]  # fmt: skip
    assert contexts == sorted(contexts) and len(set(contexts)) == 3


def test_streaming_async_clients_with_tools(base_url: str, store_path: Path) -> None:
    async def agent(session: str, question: str) -> str:
        client = AsyncOpenAI(base_url=f"{base_url}/sessions/{session}/v1", api_key="unused")
        messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
        while True:
            stream = await client.chat.completions.create(
                model=MODEL,
                messages=messages,
                tools=[ADD_TOOL],
                stream=True,
                stream_options={"include_usage": True},
            )
            text, calls, usage, finish = "", {}, None, None
            async for chunk in stream:
                usage = chunk.usage or usage
                for choice in chunk.choices:
                    finish = choice.finish_reason or finish
                    text += choice.delta.content or ""
                    for call in choice.delta.tool_calls or []:
                        calls[call.index] = call
            assert usage is not None and usage.completion_tokens > 0
            tool_calls = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.function.name, "arguments": c.function.arguments}}
                for c in calls.values()
            ]  # fmt: skip
            messages.append({"role": "assistant", "content": text or None, "tool_calls": tool_calls}
                            if tool_calls else {"role": "assistant", "content": text})  # fmt: skip
            if not tool_calls:
                assert finish == "stop"
                return text
            assert finish == "tool_calls"
            for c in tool_calls:
                content = add(c["function"]["arguments"])
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": content})

    async def main() -> list[str]:
        return await asyncio.gather(*(agent(f"a{k}", f"Sum {k} and 10 and 20?") for k in range(6)))

    answers = asyncio.run(main())
    assert answers == [f"The total is {k + 30}." for k in range(6)]
    for k in range(6):
        (traj,) = session_trajectories(store_path, f"a{k}")
        assert traj.num_turns == 3 and traj.outcome.status is OutcomeStatus.OK
    assert_token_exact(store_path)


def test_n_choices_fork_the_trajectory(base_url: str, store_path: Path) -> None:
    client = OpenAI(base_url=f"{base_url}/sessions/n/v1", api_key="unused")
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Add 2 and 5?"}], tools=[ADD_TOOL], n=3
    )
    assert [c.index for c in reply.choices] == [0, 1, 2]
    trajs = recorded(store_path)
    assert len(trajs) == 3
    forked = sorted(str(t.metadata["gateway"]["forked_from"]) for t in trajs)
    assert forked.count("None") == 1
    # The agent goes on with the second choice: that trajectory grows, the others stay.
    chosen = reply.choices[1].message
    call = chosen.tool_calls[0]  # type: ignore[index]
    client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "user", "content": "Add 2 and 5?"},
            chosen.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": add(call.function.arguments)},
        ],
        tools=[ADD_TOOL],
    )
    assert sorted(t.num_turns for t in recorded(store_path)) == [1, 1, 2]


def test_an_edited_history_starts_a_linked_trajectory(base_url: str, store_path: Path) -> None:
    client = OpenAI(base_url=f"{base_url}/sessions/e/v1", api_key="unused")
    run_agent(client, "Add 1 and 2?")
    summary = [{"role": "user", "content": "Add 4 and 4? (earlier: 1 + 2 = 3)"}]
    client.chat.completions.create(model=MODEL, messages=summary, tools=[ADD_TOOL])
    trajs = sorted(
        session_trajectories(store_path, "e"), key=lambda t: t.metadata["gateway"]["sequence"]
    )
    assert [t.num_turns for t in trajs] == [2, 1]
    assert trajs[1].outcome.status is OutcomeStatus.TRUNCATED  # its tool call was never answered
    assert_token_exact(store_path)


def test_sessions_by_path_and_header_never_mix(base_url: str, store_path: Path) -> None:
    by_path = OpenAI(base_url=f"{base_url}/sessions/p/v1", api_key="unused")
    by_header = OpenAI(
        base_url=f"{base_url}/v1", api_key="unused", default_headers={"X-Trajforge-Session": "h"}
    )
    run_agent(by_path, "Add 1 and 1?")
    run_agent(by_header, "Add 1 and 1?")
    assert len(session_trajectories(store_path, "p")) == 1
    assert len(session_trajectories(store_path, "h")) == 1
    listing = httpx.get(f"{base_url}/sessions/p").json()
    assert [t["turns"] for t in listing["trajectories"]] == [2]


def test_a_posted_reward_lands_on_the_session_trajectories(base_url: str, store_path: Path) -> None:
    client = OpenAI(base_url=f"{base_url}/sessions/r/v1", api_key="unused")
    run_agent(client, "Add 2 and 2?")
    posted = httpx.post(
        f"{base_url}/sessions/r/reward", json={"reward": 1.0, "scores": {"exact": 1}}
    )
    assert posted.status_code == 200 and posted.json()["trajectories"] == 1
    (traj,) = recorded(store_path)
    assert traj.reward == 1.0 and traj.score("exact") is not None
    missing = httpx.post(f"{base_url}/sessions/nope/reward", json={"reward": 1.0})
    assert missing.status_code == 404
    bad = httpx.post(f"{base_url}/sessions/r/reward", json={"reward": "high"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "reward"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
        ({"model": MODEL, "messages": []}, "messages"),
        ({"model": MODEL, "messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "n": 0}, "n"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "temperature": 3}, "temperature"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"}, "tool_choice"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "top_logprobs": 5}, "top_logprobs"),
        ({"model": MODEL, "messages": [{"role": "tool", "content": "1", "tool_call_id": "x"}]}, "messages[0]"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}, "messages[1].role"),
    ],
)  # fmt: skip
def test_malformed_requests_get_openai_errors_naming_the_field(
    base_url: str, body: dict[str, Any], param: str
) -> None:
    reply = httpx.post(f"{base_url}/v1/chat/completions", json=body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    assert param.split("[")[0] in error["message"]


def test_unknown_model_is_404_and_bad_json_is_400(base_url: str) -> None:
    client = OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "hi"}])
    reply = httpx.post(f"{base_url}/v1/chat/completions", content=b"{not json")
    assert reply.status_code == 400 and "not valid JSON" in reply.json()["error"]["message"]
    assert [m.id for m in client.models.list()] == [MODEL]


def test_nothing_is_recorded_for_a_refused_request(base_url: str, store_path: Path) -> None:
    httpx.post(f"{base_url}/v1/chat/completions", json={"model": "x", "messages": []})
    assert not store_path.exists() or recorded(store_path) == []
    assert json.loads(httpx.get(f"{base_url}/health").text) == {"status": "ok"}


UNREADABLE = '<tool_call>{"name": "add", "arguments": "two and three"}</tool_call>'
NAMELESS = '<tool_call>{"arguments": {"a": 1}}</tool_call>'


def _agent_turns(url: str, session: str) -> tuple[Any, str]:
    """One tool round of a client that answers every call it gets (an error for unreadable
    arguments), then its final answer."""
    client = OpenAI(base_url=f"{url}/sessions/{session}/v1", api_key="unused")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Add 2 and 3?"}]
    reply = client.chat.completions.create(model=MODEL, messages=messages, tools=[ADD_TOOL])
    message = reply.choices[0].message
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls or []:
        try:
            result = add(call.function.arguments)
        except (ValueError, KeyError, TypeError) as exc:
            result = f"error: {exc}"
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    final = client.chat.completions.create(model=MODEL, messages=messages, tools=[ADD_TOOL])
    return message, final.choices[0].message.content or ""


def _first_turn(extra: str) -> Any:
    def reply(task: object, messages: list[Message]) -> str:
        if not any(m.role is Role.TOOL for m in messages):
            return format_tool_call("add", {"a": 2, "b": 3}) + extra
        return "The total is 5."

    return reply


def test_a_call_with_unreadable_arguments_reaches_the_client_raw(store_path: Path) -> None:
    policy = ScriptedPolicy(_first_turn(UNREADABLE), load_tokenizer(), name=MODEL)
    with TrajectoryStore(store_path) as store, serving(Gateway(policy, store, "gw")) as url:
        message, answer = _agent_turns(url, "u")
    calls = message.tool_calls or []
    # As OpenAI's API may send invalid JSON there: the model's raw text as the arguments.
    assert [(c.function.name, c.function.arguments) for c in calls][1] == ("add", UNREADABLE)
    assert answer == "The total is 5."
    (traj,) = recorded(store_path)  # the client answered both calls: one trajectory
    assert traj.num_turns == 2 and traj.outcome.status is OutcomeStatus.OK
    assert_token_exact(store_path)


def test_a_nameless_call_the_client_never_saw_starts_a_new_trajectory(store_path: Path) -> None:
    policy = ScriptedPolicy(_first_turn(NAMELESS), load_tokenizer(), name=MODEL)
    with TrajectoryStore(store_path) as store, serving(Gateway(policy, store, "gw")) as url:
        message, answer = _agent_turns(url, "n")
    assert len(message.tool_calls or []) == 1 and not message.content
    assert answer == "The total is 5."
    first, second = sorted(recorded(store_path), key=lambda t: t.metadata["gateway"]["sequence"])
    # The sampled turn keeps the nameless call, unanswered; the client's next call starts a
    # trajectory of its own: its history (its assistant turn as text, not sampled), the reply.
    assert first.num_turns == 1 and first.outcome.status is OutcomeStatus.TRUNCATED
    assert len(first.messages[1].tool_calls) == 2
    assert second.num_turns == 2 and second.messages[1].logprobs is None
    assert second.messages[-1].logprobs is not None
