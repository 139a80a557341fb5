"""The episode engine against fake envs and a fake policy: structure, limits, faults, scheduling."""

from __future__ import annotations

import asyncio
import time

import pytest
from rollout_doubles import FakePolicy, TurnsEnv, make_tasks

from trajforge.rollout import EndReason, Limits, RolloutError, arollout, rollout, rollout_stream
from trajforge.schema import OutcomeStatus, Role, Trajectory

pytestmark = pytest.mark.timeout(60)


def content_of(traj: Trajectory) -> list[tuple[object, ...]]:
    """What a run decides (no ids or timings): the comparison key for determinism."""
    return [
        (
            m.role,
            m.content,
            tuple(m.token_ids or ()),
            tuple((c.id, c.name, str(c.arguments)) for c in m.tool_calls),
            m.reward,
            m.state_key,
        )
        for m in traj.messages
    ] + [(traj.outcome.status, traj.outcome.reward, traj.outcome.reason)]


def test_rollout_returns_every_task_and_sample_in_order_with_groups_usage_and_turn_data() -> None:
    tasks = make_tasks(3)
    trajs = rollout(
        lambda: TurnsEnv(3), FakePolicy(), tasks, n_per_task=2, run_id="r", progress=False
    )
    assert [(t.task.id, t.sample_index) for t in trajs] == [
        (f"t{i}", s) for i in range(3) for s in range(2)
    ]
    assert trajs[0].group_id == trajs[1].group_id != trajs[2].group_id
    assert len({t.group_id for t in trajs}) == 3
    for traj in trajs:
        assert traj.run_id == "r" and traj.env == "turns" and traj.model == "fake"
        assert traj.outcome.status is OutcomeStatus.OK and traj.outcome.reward == 1.0
        assert traj.outcome.reason is None and traj.tools[0].name == "echo"
        assistants = [m for m in traj.messages if m.role is Role.ASSISTANT]
        assert [m.tool_calls[0].id for m in assistants] == ["call_0_0", "call_1_0", "call_2_0"]
        # Turn rewards on the non-final turns; the final step's reward is the outcome.
        assert [m.reward for m in assistants] == [pytest.approx(0.1), pytest.approx(0.2), None]
        assert [m.state_key for m in assistants] == [f"{traj.task.id}:{k}" for k in range(3)]
        assert all(m.timing is not None for m in traj.messages[2:])
        usage = traj.usage
        assert usage.turns == 3 and usage.tool_calls == 3
        assert usage.completion_tokens == sum(len(m.token_ids or []) for m in assistants)
        # Prompt tokens: the context before each of the 3 turns, summed.
        prefix = [len(m.token_ids or []) for m in traj.messages]
        assert usage.prompt_tokens == sum(prefix[:2]) + sum(prefix[:4]) + sum(prefix[:6])
        assert usage.wall_time_s >= usage.generation_time_s
        assert traj.is_tokenized


def test_same_seed_same_trajectories_in_both_modes_other_seed_differs() -> None:
    tasks = make_tasks(4)

    def run(seed: int, lockstep: bool) -> list[list[tuple[object, ...]]]:
        trajs = rollout(
            lambda: TurnsEnv(2),
            FakePolicy(),
            tasks,
            n_per_task=2,
            seed=seed,
            lockstep=lockstep,
            progress=False,
        )
        return [content_of(t) for t in trajs]

    base = run(1, lockstep=False)
    assert run(1, lockstep=False) == base
    assert run(1, lockstep=True) == base
    assert run(2, lockstep=False) != base
    # Samples of one task get different seeds, hence different replies.
    assert base[0] != base[1]


@pytest.mark.parametrize(
    ("limits", "status", "reason", "turns"),
    [
        (Limits(max_turns=2), OutcomeStatus.TRUNCATED, EndReason.MAX_TURNS, 2),
        (Limits(max_new_tokens=2), OutcomeStatus.TRUNCATED, EndReason.MAX_NEW_TOKENS, 1),
        (Limits(max_new_tokens=2, stop_on_turn_limit=False), OutcomeStatus.OK, None, 5),
        (Limits(max_episode_tokens=7), OutcomeStatus.TRUNCATED, EndReason.MAX_EPISODE_TOKENS, 2),
        (Limits(max_context_tokens=20), OutcomeStatus.TRUNCATED, EndReason.MAX_CONTEXT_TOKENS, 2),
    ],
)
def test_token_and_turn_limits_truncate_and_keep_what_was_produced(
    limits: Limits, status: OutcomeStatus, reason: EndReason | None, turns: int
) -> None:
    [traj] = rollout(
        lambda: TurnsEnv(5), FakePolicy(), make_tasks(1), limits=limits, progress=False
    )
    assert traj.outcome.status is status
    assert traj.outcome.reason == reason
    assert traj.usage.turns == turns == traj.num_turns
    if limits.max_episode_tokens is not None:
        assert traj.usage.completion_tokens <= limits.max_episode_tokens
    if limits.max_context_tokens is not None:
        assert traj.num_tokens <= limits.max_context_tokens
    if status is not OutcomeStatus.OK:
        assert traj.outcome.reward is None


def test_tool_timeout_and_episode_timeout_end_the_episode_keeping_the_last_assistant_message() -> (
    None
):
    tasks = make_tasks(3)
    faults = {"t1": "hang"}
    limits = Limits(tool_timeout_s=0.3, episode_timeout_s=5)
    start = time.monotonic()
    trajs = rollout(
        lambda: TurnsEnv(3, faults=faults), FakePolicy(), tasks, limits=limits, progress=False
    )
    assert time.monotonic() - start < 4
    hung = trajs[1]
    assert (
        hung.outcome.status is OutcomeStatus.TIMEOUT
        and hung.outcome.reason == EndReason.TOOL_TIMEOUT
    )
    assert "tool_timeout_s=0.3" in (hung.outcome.error or "")
    # Cut while its tool ran: the last message is the assistant's, its call unanswered.
    assert hung.messages[-1].role is Role.ASSISTANT and hung.messages[-1].tool_calls
    assert hung.usage.turns == 2
    assert [t.outcome.status for t in (trajs[0], trajs[2])] == [OutcomeStatus.OK, OutcomeStatus.OK]

    [slow] = rollout(
        lambda: TurnsEnv(5, delay=lambda task, turn: 0.15),
        FakePolicy(),
        make_tasks(1),
        limits=Limits(episode_timeout_s=0.4),
        progress=False,
    )
    assert (
        slow.outcome.status is OutcomeStatus.TIMEOUT
        and slow.outcome.reason == EndReason.EPISODE_TIMEOUT
    )
    assert 1 <= slow.usage.turns <= 3 and slow.usage.wall_time_s < 1.0


def test_env_and_policy_failures_end_only_their_episode_with_the_error_recorded() -> None:
    tasks = make_tasks(5)
    faults = {"t1": "reset", "t2": "step"}
    closed: list[str] = []
    trajs = rollout(
        lambda: TurnsEnv(3, faults=faults, close_log=closed), FakePolicy(), tasks, progress=False
    )
    statuses = [t.outcome.status for t in trajs]
    assert statuses == [
        OutcomeStatus.OK,
        OutcomeStatus.ERROR,
        OutcomeStatus.ERROR,
        OutcomeStatus.OK,
        OutcomeStatus.OK,
    ]
    assert (
        trajs[1].outcome.error == "ValueError: reset failed on purpose" and trajs[1].messages == []
    )
    assert trajs[1].outcome.reason == EndReason.ENV_ERROR
    assert trajs[2].outcome.error == "KeyError: 'tool table missing'"
    assert trajs[2].messages[-1].role is Role.ASSISTANT and trajs[2].usage.turns == 2
    assert sorted(closed) == ["t0", "t2", "t3", "t4"]  # every env that started is closed

    [broken] = rollout(
        lambda: TurnsEnv(3), FakePolicy(fail_on_turn=1), make_tasks(1), progress=False
    )
    assert (
        broken.outcome.status is OutcomeStatus.ERROR
        and broken.outcome.reason == EndReason.POLICY_ERROR
    )
    assert broken.outcome.error == "RuntimeError: policy exploded on turn 1"
    assert broken.messages[-1].role is Role.TOOL  # the first turn's result is kept

    [hung] = rollout(
        lambda: TurnsEnv(3),
        FakePolicy(hang_on_turn=0),
        make_tasks(1),
        limits=Limits(episode_timeout_s=0.3),
        progress=False,
    )
    assert (
        hung.outcome.status is OutcomeStatus.TIMEOUT
        and hung.outcome.reason == EndReason.EPISODE_TIMEOUT
    )


def delay_slow_t0(task_id: str, turn: int) -> float:
    return 0.4 if task_id == "t0" else 0.01


def test_async_mode_a_slow_tool_stalls_only_its_own_episode() -> None:
    async def main() -> tuple[list[str], list[Trajectory]]:
        order: list[str] = []
        trajs: list[Trajectory] = []
        stream = rollout_stream(
            lambda: TurnsEnv(3, delay=delay_slow_t0), FakePolicy(), make_tasks(6), progress=False
        )
        async for traj in stream:
            order.append(traj.task.id)
            trajs.append(traj)
        return order, trajs

    order, trajs = asyncio.run(main())
    assert order[-1] == "t0" and sorted(order) == sorted(f"t{i}" for i in range(6))
    fast = [t for t in trajs if t.task.id != "t0"]
    assert max(t.usage.wall_time_s for t in fast) < 0.3
    slow = next(t for t in trajs if t.task.id == "t0")
    assert slow.usage.tool_time_s >= 1.2


def test_lockstep_mode_requests_generation_together_and_waits_for_every_tool() -> None:
    policy = FakePolicy(delay_s=0.01)
    trajs = rollout(
        lambda: TurnsEnv(3, delay=delay_slow_t0),
        policy,
        make_tasks(6),
        lockstep=True,
        progress=False,
    )
    assert policy.max_in_flight == 6 and policy.calls == 18
    fast = [t for t in trajs if t.task.id != "t0"]
    # Turns 2 and 3 of every episode wait for t0's slow tool of the turn before.
    assert min(t.usage.wall_time_s for t in fast) >= 0.8
    assert all(t.outcome.status is OutcomeStatus.OK for t in trajs)


def test_max_concurrency_bounds_episodes_in_flight_in_both_modes() -> None:
    for lockstep in (False, True):
        policy = FakePolicy(delay_s=0.01)
        trajs = rollout(
            lambda: TurnsEnv(2),
            policy,
            make_tasks(10),
            max_concurrency=3,
            lockstep=lockstep,
            progress=False,
        )
        assert len(trajs) == 10 and policy.max_in_flight == 3


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(RolloutError, match=r"tasks\[1\]\.id"):
        rollout(lambda: TurnsEnv(1), FakePolicy(), make_tasks(1) * 2, progress=False)
    with pytest.raises(RolloutError, match="n_per_task"):
        rollout(lambda: TurnsEnv(1), FakePolicy(), make_tasks(1), n_per_task=0, progress=False)

    async def inside_loop() -> None:
        rollout(lambda: TurnsEnv(1), FakePolicy(), make_tasks(1), progress=False)

    with pytest.raises(RolloutError, match="await arollout"):
        asyncio.run(inside_loop())


def test_arollout_with_progress_bar_runs() -> None:
    trajs = asyncio.run(arollout(lambda: TurnsEnv(1), FakePolicy(), make_tasks(2), progress=True))
    assert len(trajs) == 2
