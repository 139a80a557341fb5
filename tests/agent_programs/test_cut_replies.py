"""A reply cut at its token cap is ``truncated`` wherever it is recorded, with the same reason
and error: by an episode of ``eval`` or ``rollout``, and by the gateway an agent program calls
(a model here, a forwarded server, a text completion). ``rollout.cut_turn`` decides for all."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI
from serve_helpers import recorded

from trajforge.agent_programs import AgentRunner
from trajforge.policy.base import FinishReason
from trajforge.policy.naming import load_policy
from trajforge.policy.token_policy import TokenPolicy
from trajforge.rollout import (
    EndReason,
    PolicyRef,
    RolloutSpec,
    Sampling,
    TurnCap,
    cut_turn,
    run_rollout,
)
from trajforge.schema import Fault, Message, Outcome, OutcomeStatus, Role, Task
from trajforge.serve.gateway import Gateway
from trajforge.serve.recorder import turn_cap
from trajforge.serve.server import serving
from trajforge.serve.upstream import open_gateway
from trajforge.store import TrajectoryStore

AGENT = f"{sys.executable} {Path(__file__).parent / 'agent_program.py'}"
CAP = 4
CUT = Outcome(
    status=OutcomeStatus.TRUNCATED,
    reason=EndReason.MAX_NEW_TOKENS,
    error=f"the turn was cut at {CAP} tokens (max_new_tokens)",
    fault=Fault.POLICY,
)
"""How a turn cut at ``CAP`` tokens ends an episode (the tiny model never stops by itself)."""
TASK = Task(id="t", prompt="Add 1 and 2?", answer=3, data={"max_tokens": CAP})


@pytest.fixture(scope="module")
def tiny() -> Iterator[TokenPolicy]:
    policy = load_policy("tiny")
    assert isinstance(policy, TokenPolicy)
    yield policy
    asyncio.run(policy.close())


def _ended(outcome: Outcome) -> Outcome:
    """How an episode ended, its reward aside."""
    return outcome.model_copy(update={"reward": None})


def test_eval_and_an_agent_programs_gateway_record_a_cut_reply_alike(tiny: TokenPolicy) -> None:
    evaluated = RolloutSpec(
        env="calculator", tasks=[TASK], sampling=Sampling(max_new_tokens=CAP), run_id="ev"
    )
    (episode,) = run_rollout(evaluated, policy=tiny)
    collected = RolloutSpec(tasks=[TASK], run_id="col")
    runner = AgentRunner(AGENT, gateway=Gateway(tiny, None, ""))
    (run,) = run_rollout(collected, runner=runner)
    assert [len(m.token_ids or ()) for m in run.messages if m.role is Role.ASSISTANT] == [CAP]
    assert _ended(episode.outcome) == _ended(run.outcome) == CUT
    assert run.run_id == "col"  # the run's id reaches the gateway's trajectories by its session


def test_a_forwarded_reply_cut_at_the_agents_max_tokens_is_truncated(
    tiny: TokenPolicy, tmp_path: Path
) -> None:
    upstream = Gateway(tiny, None, "up")
    with serving(upstream) as base, TrajectoryStore(tmp_path / "proxy.db") as store:
        spec = f"openai:{base}/v1#{tiny.name}"
        proxy, _ = open_gateway(PolicyRef(name=spec), store, "proxied")
        with serving(proxy) as url:
            client = OpenAI(base_url=f"{url}/sessions/s/v1", api_key="unused")
            messages = [{"role": "user", "content": TASK.prompt}]
            reply = client.chat.completions.create(model=spec, messages=messages, max_tokens=CAP)
        (traj,) = store.query(run="proxied")
    assert reply.choices[0].finish_reason == "length"
    assert traj.metadata["gateway"]["text_only"] is False and _ended(traj.outcome) == CUT


def test_a_conversation_going_on_after_a_cut_stays_one_trajectory_truncated(
    tiny: TokenPolicy, tmp_path: Path
) -> None:
    store_path = tmp_path / "gw.db"
    with TrajectoryStore(store_path) as store, serving(Gateway(tiny, store, "gw")) as url:
        client = OpenAI(base_url=f"{url}/sessions/s/v1", api_key="unused")
        messages = [{"role": "user", "content": TASK.prompt}]
        first = client.chat.completions.create(model="tiny", messages=messages, max_tokens=CAP)
        messages += [
            {"role": "assistant", "content": first.choices[0].message.content or ""},
            {"role": "user", "content": "Go on."},
        ]
        client.chat.completions.create(model="tiny", messages=messages, max_tokens=CAP + 2)
        text = client.completions.create(model="tiny", prompt="Once upon a", max_tokens=CAP)
    assert text.choices[0].finish_reason == "length"
    chat, raw = sorted(recorded(store_path), key=lambda t: t.num_turns, reverse=True)
    # The first cut is how the conversation ends, as it ends an episode; it still continues.
    assert chat.num_turns == 2 and _ended(chat.outcome) == CUT
    assert raw.metadata["rendering"] == "raw" and _ended(raw.outcome) == CUT


def _reply(sampled: int | None) -> Message:
    ids = None if sampled is None else list(range(sampled))
    return Message(role=Role.ASSISTANT, content="x", token_ids=ids)


def test_a_turn_is_cut_when_it_sampled_every_token_its_cap_allowed() -> None:
    assert cut_turn(_reply(CAP - 1), TurnCap(CAP)) is None
    assert cut_turn(_reply(CAP), TurnCap(CAP)) == CUT
    # Counted ids win over what a server says; without them (or a cap), its finish decides.
    assert cut_turn(_reply(CAP - 1), TurnCap(CAP), FinishReason.LENGTH) is None
    assert cut_turn(_reply(None), TurnCap(CAP), FinishReason.STOP) is None
    by_server = cut_turn(_reply(None), None, FinishReason.LENGTH)
    assert by_server is not None and by_server.reason == EndReason.MAX_NEW_TOKENS
    assert by_server.error == "the turn was cut at the server's token limit (max_new_tokens)"
    context = cut_turn(_reply(3), TurnCap(3, EndReason.MAX_CONTEXT_TOKENS))
    assert context is not None and context.reason == EndReason.MAX_CONTEXT_TOKENS


def test_a_reply_with_no_more_room_than_it_asked_for_is_capped_by_the_context() -> None:
    assert turn_cap(16, None) == TurnCap(16, EndReason.MAX_NEW_TOKENS)
    assert turn_cap(16, 100) == TurnCap(16, EndReason.MAX_NEW_TOKENS)
    assert turn_cap(16, 16) == TurnCap(16, EndReason.MAX_CONTEXT_TOKENS)  # ties: the context
    assert turn_cap(16, 5) == TurnCap(5, EndReason.MAX_CONTEXT_TOKENS)
