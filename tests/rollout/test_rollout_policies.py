"""The engine with the real pieces: a built-in ToolEnv, the scripted expert, the tiny HFPolicy."""

from __future__ import annotations

import asyncio

import pytest
from rollout_doubles import TurnsEnv, make_tasks, run_live

from trajforge.envs.registry import get_env
from trajforge.envs.tool import tool
from trajforge.envs.tool_env import ToolEnv
from trajforge.policy.check import check_trajectory
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.naming import load_policy
from trajforge.rollout import EndReason, Limits, Sampling
from trajforge.schema import Message, OutcomeStatus, Role, Task

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_expert_on_the_calculator_env_solves_every_task_with_exact_tokens() -> None:
    entry = get_env("calculator")

    def expert(task: Task | None, messages: list[Message]) -> str | None:
        return entry.expert(task, messages) if task is not None else None

    policy = load_policy("expert", expert=expert)
    tasks = entry.tasks(4, seed=1)
    trajs = run_live(entry.make, policy, tasks, n=2)
    tokenizer = load_tokenizer()
    for traj in trajs:
        assert traj.outcome.status is OutcomeStatus.OK and traj.outcome.reward == 1.0
        assert traj.env == "calculator" and traj.tools
        assert check_trajectory(traj, tokenizer) == []
        assistants = [m for m in traj.messages if m.role is Role.ASSISTANT]
        assert all(m.state_key for m in assistants)
        assert assistants[-1].reward is None and all(m.reward == 0.0 for m in assistants[:-1])
        tool_msgs = [m for m in traj.messages if m.role is Role.TOOL]
        assert traj.usage.tool_calls == len(tool_msgs) > 0


def test_tool_env_gets_the_tool_timeout_and_turn_limit() -> None:
    entry = get_env("calculator")
    policy = load_policy("expert", expert=lambda task, messages: "<tool_call>not json</tool_call>")
    [traj] = run_live(
        entry.make,
        policy,
        entry.tasks(1),
        limits=Limits(max_turns=2, tool_timeout_s=1.5),
    )
    # The ToolEnv itself cut the episode at max_turns and still scored it.
    assert traj.outcome.status is OutcomeStatus.TRUNCATED
    assert traj.outcome.reason == EndReason.ENV_TRUNCATED and traj.outcome.reward == 0.0
    assert traj.usage.turns == 2


def test_tiny_hf_policy_batches_across_episodes_and_both_modes_agree_token_for_token() -> None:
    policy = load_policy("tiny", max_batch_size=8)
    sampling = Sampling(max_new_tokens=6)
    limits = Limits(stop_on_turn_limit=False)
    runs = [
        run_live(
            lambda: TurnsEnv(2),
            policy,
            make_tasks(6),
            limits=limits,
            sampling=sampling,
            lockstep=lockstep,
        )
        for lockstep in (False, True)
    ]
    tokenizer = load_tokenizer()
    for a, b in zip(*runs, strict=True):
        assert a.outcome.status is OutcomeStatus.OK and a.usage.turns == 2
        assert [m.token_ids for m in a.messages] == [m.token_ids for m in b.messages]
        assert check_trajectory(a, tokenizer) == []
        assert a.usage.completion_tokens == 12
    assert policy.stats.max_rows > 1  # generations of different episodes shared a batch

    # With stop_on_turn_limit (the default) a turn cut at max_new_tokens ends the episode.
    [cut] = run_live(lambda: TurnsEnv(2), policy, make_tasks(1), sampling=sampling)
    assert (
        cut.outcome.status is OutcomeStatus.TRUNCATED
        and cut.outcome.reason == EndReason.MAX_NEW_TOKENS
    )


def test_a_finished_episode_leaves_nothing_in_the_prefix_cache() -> None:
    """Second turns reuse the first turns' keys and values; once the episodes end, no prompt
    can continue them, and the cache holds none of them (an eval of 200 long episodes grew by
    470 MB when it kept them up to its byte limit)."""
    policy = load_policy("tiny", max_batch_size=8)
    cache = policy.prefix_cache
    assert cache is not None
    limits = Limits(stop_on_turn_limit=False)
    for lockstep in (False, True):
        runs = run_live(
            lambda: TurnsEnv(2), policy, make_tasks(6), limits=limits,
            sampling=Sampling(max_new_tokens=6), lockstep=lockstep,
        )  # fmt: skip
        assert all(t.usage.turns == 2 for t in runs)
        # The worker drops them between its steps; closing waits for it.
        asyncio.run(policy.close())
        assert len(cache) == 0
    assert cache.hits >= 12  # every second turn continued its first


def test_a_tool_env_times_its_own_slow_tool_out_and_the_episode_goes_on() -> None:
    @tool
    async def slow(x: int) -> str:
        """Answer after a long time.

        Args:
            x: Anything.
        """
        await asyncio.sleep(30)
        return "late"

    def make() -> ToolEnv:
        return ToolEnv([slow], max_turns=2, name="slow_env")

    replies = ['<tool_call>{"name": "slow", "arguments": {"x": 1}}</tool_call>', "done"]
    policy = load_policy(
        "expert",
        expert=lambda task, messages: replies[sum(m.role is Role.ASSISTANT for m in messages)],
    )
    [traj] = run_live(make, policy, make_tasks(1), limits=Limits(tool_timeout_s=0.3))
    tool_msg = next(m for m in traj.messages if m.role is Role.TOOL)
    assert tool_msg.content == "Error: tool 'slow' timed out after 0.3 s"
    assert traj.outcome.status is OutcomeStatus.OK and traj.usage.turns == 2
