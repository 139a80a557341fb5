"""The gateway over real models (the tiny random one; the embedded SmolLM2 in a slow test) and
what happens to a call whose client leaves."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import AsyncOpenAI, OpenAI
from serve_helpers import adder_reply, assert_token_exact, recorded

from trajforge.policy.base import Completion
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.naming import load_policy
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.policy.token_policy import TokenPolicy, TurnRequest
from trajforge.schema import OutcomeStatus, Role
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving
from trajforge.store import TrajectoryStore


@pytest.fixture
def served(request: pytest.FixtureRequest, store_path: Path) -> Iterator[str]:
    policy = request.param() if callable(request.param) else load_policy(request.param)
    assert isinstance(policy, TokenPolicy)
    store = TrajectoryStore(store_path)
    gateway = Gateway(policy, store, run_id="gw")
    with serving(gateway) as url:
        yield url
    asyncio.run(policy.close())
    store.close()


def _sample_concurrently(url: str, model: str, clients: int) -> list[tuple[int, int]]:
    async def one(k: int) -> tuple[int, int]:
        client = AsyncOpenAI(base_url=f"{url}/sessions/c{k}/v1", api_key="unused")
        reply = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": f"Tell me about the number {k}."}],
            max_tokens=12,
            temperature=1.0,
            seed=k,
            logprobs=True,
        )
        choice = reply.choices[0]
        assert choice.logprobs is not None and choice.logprobs.content is not None
        assert reply.usage is not None
        return reply.usage.completion_tokens, len(choice.logprobs.content)

    async def main() -> list[tuple[int, int]]:
        return await asyncio.gather(*(one(k) for k in range(clients)))

    return asyncio.run(main())


@pytest.mark.parametrize("served", ["tiny"], indirect=True)
def test_concurrent_clients_of_the_tiny_model(served: str, store_path: Path) -> None:
    url = served
    counts = _sample_concurrently(url, "tiny", clients=8)
    assert all(tokens == logprobs and 1 <= tokens <= 12 for tokens, logprobs in counts)
    trajs = recorded(store_path)
    assert len(trajs) == 8
    for traj in trajs:
        (reply,) = [m for m in traj.messages if m.role is Role.ASSISTANT]
        assert reply.logprobs is not None and len(reply.logprobs) == len(reply.token_ids or [])
        assert traj.metadata["precision"] == "fp32"
    assert_token_exact(store_path)


@pytest.mark.slow
@pytest.mark.parametrize("served", ["embedded"], indirect=True)
def test_concurrent_clients_of_the_embedded_model(served: str, store_path: Path) -> None:
    url = served
    counts = _sample_concurrently(url, "embedded", clients=4)
    assert all(tokens == logprobs for tokens, logprobs in counts)
    assert len(recorded(store_path)) == 4
    assert_token_exact(store_path)


class SlowPolicy(ScriptedPolicy):
    """The adder, taking seconds to answer: long enough for a client to give up."""

    async def complete(self, turn: TurnRequest) -> Completion:
        await asyncio.sleep(30)
        return await super().complete(turn)


def _slow() -> SlowPolicy:
    return SlowPolicy(adder_reply, load_tokenizer(), name="slow")


@pytest.mark.parametrize("served", [_slow], indirect=True)
def test_a_client_that_leaves_mid_stream_is_recorded_as_truncated(
    served: str, store_path: Path
) -> None:
    url = served
    body = {"model": "slow", "stream": True, "messages": [{"role": "user", "content": "1 and 2?"}]}
    chat = f"{url}/v1/chat/completions"
    with (
        pytest.raises(httpx.ReadTimeout),
        httpx.stream("POST", chat, json=body, timeout=0.5) as reply,
    ):
        assert reply.status_code == 200
        for _ in reply.iter_lines():
            pass
    deadline = time.monotonic() + 10
    while not recorded(store_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    (traj,) = recorded(store_path)
    assert traj.outcome.status is OutcomeStatus.TRUNCATED
    assert traj.outcome.reason == "the client disconnected"
    assert [m.role for m in traj.messages] == [Role.USER]


@pytest.mark.parametrize("served", ["tiny"], indirect=True)
def test_text_completions_are_recorded_raw(served: str, store_path: Path) -> None:
    client = OpenAI(base_url=f"{served}/sessions/raw/v1", api_key="unused")
    reply = client.completions.create(
        model="tiny", prompt="Once upon a time", max_tokens=5, n=2, seed=3, logprobs=0
    )
    assert [c.index for c in reply.choices] == [0, 1]
    assert reply.usage is not None and reply.usage.completion_tokens >= 2
    assert reply.choices[0].logprobs is not None
    assert len(reply.choices[0].logprobs.token_logprobs or []) >= 1
    by_ids = client.completions.create(model="tiny", prompt=[1, 2, 3], max_tokens=3)
    assert by_ids.usage is not None and by_ids.usage.prompt_tokens == 3
    trajs = recorded(store_path)
    assert len(trajs) == 3 and all(t.metadata["rendering"] == "raw" for t in trajs)
    assert all([m.role for m in t.messages] == [Role.USER, Role.ASSISTANT] for t in trajs)
    assert_token_exact(store_path)
    for field, value in [("logprobs", 3), ("echo", True), ("presence_penalty", 1.0)]:
        refused = httpx.post(
            f"{served}/v1/completions", json={"model": "tiny", "prompt": "x", field: value}
        )
        error = refused.json()["error"]
        assert refused.status_code == 400 and error["param"] == field
        assert error["message"].startswith(f"{field}: not supported"), error
