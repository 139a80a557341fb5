"""``trajforge serve --model openai:<url>#<model>``: calls forwarded to another server and
recorded with the ids it reports, text-only when it reports none, a new trajectory on drift."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from openai import OpenAI
from serve_helpers import ADD_TOOL, MODEL, add, recorded

from trajforge.rollout import PolicyRef
from trajforge.schema import Role
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving, serving_app
from trajforge.serve.upstream import UpstreamGateway, open_gateway
from trajforge.store import TrajectoryStore


def _agent(url: str, session: str, model: str, question: str) -> str:
    client = OpenAI(base_url=f"{url}/sessions/{session}/v1", api_key="unused")
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    while True:
        reply = client.chat.completions.create(model=model, messages=messages, tools=[ADD_TOOL])
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or ""
        for call in message.tool_calls:
            result = add(call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


@pytest.fixture
def proxy_store(tmp_path: Path) -> Iterator[TrajectoryStore]:
    with TrajectoryStore(tmp_path / "proxy.db") as store:
        yield store


def test_a_forwarded_agent_run_records_the_servers_exact_ids(
    base_url: str, gateway: Gateway, store_path: Path, proxy_store: TrajectoryStore
) -> None:
    spec = f"openai:{base_url}/v1#{MODEL}"
    proxy, runs_on = open_gateway(PolicyRef(name=spec), proxy_store, "proxied")
    assert isinstance(proxy, UpstreamGateway) and runs_on == f"forwarded to {base_url}/v1"
    with serving(proxy) as url:
        assert _agent(url, "fwd", spec, "Add 5 and 6 and 7?") == "The total is 18."
    (upstream,) = recorded(store_path)  # what the upstream server itself recorded
    (traj,) = proxy_store.query(run="proxied")
    assert traj.model == spec and traj.metadata["gateway"]["text_only"] is False
    assert traj.num_turns == 3 and [m.role for m in traj.messages] == [
        m.role for m in upstream.messages
    ]
    context = [t for m in traj.messages for t in m.token_ids or []]
    assert context == [t for m in upstream.messages for t in m.token_ids or []]
    sampled = [m.token_ids for m in traj.messages if m.role is Role.ASSISTANT]
    assert sampled == [m.token_ids for m in upstream.messages if m.role is Role.ASSISTANT]


def test_a_sessions_system_text_reaches_the_server_and_the_record(
    base_url: str, gateway: Gateway, store_path: Path, proxy_store: TrajectoryStore
) -> None:
    spec = f"openai:{base_url}/v1#{MODEL}"
    proxy, _ = open_gateway(PolicyRef(name=spec), proxy_store, "proxied")
    proxy.recorder.open("told", None, system_text="LESSONS", annotations={"memory": {"k": 1}})
    with serving(proxy) as url:
        assert _agent(url, "told", spec, "Add 5 and 6 and 7?") == "The total is 18."
    (upstream,) = recorded(store_path)  # every forwarded call continued one conversation
    (traj,) = proxy_store.query(run="proxied")
    for conversation in (upstream, traj):
        assert conversation.messages[0].role is Role.SYSTEM
        assert conversation.messages[0].content == "LESSONS"
    assert traj.num_turns == 3 and traj.metadata["memory"] == {"k": 1}
    context = [t for m in traj.messages for t in m.token_ids or []]
    assert context == [t for m in upstream.messages for t in m.token_ids or []]


def _fake_server(mode: str) -> FastAPI:
    """An OpenAI-compatible server that answers "ok"; ``none`` reports no token ids (as
    llama.cpp), ``drift`` reports a prompt that never extends the previous one."""
    app = FastAPI()
    calls = {"n": 0}

    @app.post("/v1/chat/completions")
    async def chat(body: dict[str, Any]) -> dict[str, Any]:
        calls["n"] += 1
        choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": "ok"}}  # fmt: skip
        reply: dict[str, Any] = {"id": "x", "object": "chat.completion", "created": 0,
                                 "model": body["model"], "choices": [choice],
                                 "usage": {"prompt_tokens": 5, "completion_tokens": 2,
                                           "total_tokens": 7}}  # fmt: skip
        if mode == "drift":
            reply["prompt_token_ids"] = [100 + calls["n"]] * (3 * len(body["messages"]))
            choice["token_ids"] = [7, 8]
        return reply

    return app


@pytest.mark.parametrize("mode", ["none", "drift"])
def test_servers_without_ids_or_with_drift(mode: str, proxy_store: TrajectoryStore) -> None:
    with serving_app(_fake_server(mode)) as upstream_url:
        proxy = UpstreamGateway(f"{upstream_url}/v1", "fake", proxy_store, "proxied")
        with serving(proxy) as url:
            client = OpenAI(base_url=f"{url}/sessions/s/v1", api_key="unused")
            messages = [{"role": "user", "content": "hi"}]
            first = client.chat.completions.create(model="fake", messages=messages)
            messages += [first.choices[0].message.model_dump(exclude_none=True),
                         {"role": "user", "content": "again"}]  # fmt: skip
            second = client.chat.completions.create(model="fake", messages=messages)
            # The prompt's size: its ids when the server reports them, else its count.
            assert second.usage is not None
            assert second.usage.prompt_tokens == (5 if mode == "none" else 9)
    trajs = sorted(
        proxy_store.query(run="proxied"), key=lambda t: t.metadata["gateway"]["sequence"]
    )
    if mode == "none":
        (traj,) = trajs
        assert traj.num_turns == 2 and traj.metadata["gateway"]["text_only"] is True
        assert all(m.token_ids is None for m in traj.messages)
    else:
        assert [t.num_turns for t in trajs] == [1, 2]
        assert trajs[1].metadata["gateway"]["drift"] is True
        assert [m.token_ids for m in trajs[1].messages] == [[], [], [102] * 9, [7, 8]]
    assert json.dumps([t.model_dump(mode="json") for t in trajs])  # all storable and valid
