"""The episode engine against fake envs and a fake policy: structure, limits, faults, scheduling."""

from __future__ import annotations

import asyncio
import io
import time

import pytest
from pydantic import ValidationError
from rich.console import Console
from rollout_doubles import FakePolicy, TurnsEnv, make_tasks, run_live

from trajforge.rollout import (
    EndReason,
    Limits,
    RolloutError,
    RolloutHook,
    RolloutProgress,
    RolloutRun,
    RolloutSpec,
    arun_rollout,
    open_rollout,
    run_rollout,
)
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
    trajs = run_live(lambda: TurnsEnv(3), FakePolicy(), tasks, n=2, run_id="r")
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
        trajs = run_live(
            lambda: TurnsEnv(2),
            FakePolicy(),
            tasks,
            n=2,
            seed=seed,
            lockstep=lockstep,
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
    [traj] = run_live(lambda: TurnsEnv(5), FakePolicy(), make_tasks(1), limits=limits)
    assert traj.outcome.status is status
    assert traj.outcome.reason == reason
    assert traj.usage.turns == turns == traj.num_turns
    if limits.max_episode_tokens is not None:
        assert traj.usage.completion_tokens <= limits.max_episode_tokens
    if limits.max_context_tokens is not None:
        assert traj.num_tokens <= limits.max_context_tokens
    if status is not OutcomeStatus.OK:
        # Cut short before an answer: the policy's failure, rewarded 0 (not left unscored).
        assert traj.outcome.reward == 0.0


def test_tool_timeout_and_episode_timeout_end_the_episode_keeping_the_last_assistant_message() -> (
    None
):
    tasks = make_tasks(3)
    faults = {"t1": "hang"}
    limits = Limits(tool_timeout_s=0.3, episode_timeout_s=5)
    start = time.monotonic()
    trajs = run_live(lambda: TurnsEnv(3, faults=faults), FakePolicy(), tasks, limits=limits)
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

    [slow] = run_live(
        lambda: TurnsEnv(5, delay=lambda task, turn: 0.15),
        FakePolicy(),
        make_tasks(1),
        limits=Limits(episode_timeout_s=0.4),
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
    trajs = run_live(lambda: TurnsEnv(3, faults=faults, close_log=closed), FakePolicy(), tasks)
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

    [broken] = run_live(lambda: TurnsEnv(3), FakePolicy(fail_on_turn=1), make_tasks(1))
    assert (
        broken.outcome.status is OutcomeStatus.ERROR
        and broken.outcome.reason == EndReason.POLICY_ERROR
    )
    assert broken.outcome.error == "RuntimeError: policy exploded on turn 1"
    assert broken.messages[-1].role is Role.TOOL  # the first turn's result is kept

    [hung] = run_live(
        lambda: TurnsEnv(3),
        FakePolicy(hang_on_turn=0),
        make_tasks(1),
        limits=Limits(episode_timeout_s=0.3),
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
        spec = RolloutSpec(tasks=make_tasks(6))
        make = lambda: TurnsEnv(3, delay=delay_slow_t0)  # noqa: E731
        async with open_rollout(spec, env=make, policy=FakePolicy()) as stream:
            async for traj in stream:
                order.append(traj.task.id)
                trajs.append(traj)
        assert stream.run.stats.done == 6 and stream.run.resumed == 0
        return order, trajs

    order, trajs = asyncio.run(main())
    assert order[-1] == "t0" and sorted(order) == sorted(f"t{i}" for i in range(6))
    fast = [t for t in trajs if t.task.id != "t0"]
    assert max(t.usage.wall_time_s for t in fast) < 0.3
    slow = next(t for t in trajs if t.task.id == "t0")
    assert slow.usage.tool_time_s >= 1.2


def test_lockstep_mode_requests_generation_together_and_waits_for_every_tool() -> None:
    policy = FakePolicy(delay_s=0.01)
    trajs = run_live(
        lambda: TurnsEnv(3, delay=delay_slow_t0),
        policy,
        make_tasks(6),
        lockstep=True,
    )
    assert policy.max_in_flight == 6 and policy.calls == 18
    fast = [t for t in trajs if t.task.id != "t0"]
    # Turns 2 and 3 of every episode wait for t0's slow tool of the turn before.
    assert min(t.usage.wall_time_s for t in fast) >= 0.8
    assert all(t.outcome.status is OutcomeStatus.OK for t in trajs)


def test_concurrency_bounds_episodes_in_flight_in_both_modes() -> None:
    for lockstep in (False, True):
        policy = FakePolicy(delay_s=0.01)
        trajs = run_live(
            lambda: TurnsEnv(2),
            policy,
            make_tasks(10),
            concurrency=3,
            lockstep=lockstep,
        )
        assert len(trajs) == 10 and policy.max_in_flight == 3


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(RolloutError, match=r"tasks\[1\]\.id"):
        run_live(lambda: TurnsEnv(1), FakePolicy(), make_tasks(1) * 2)
    with pytest.raises(ValidationError, match=r"n\n  Input should be greater than or equal to 1"):
        run_live(lambda: TurnsEnv(1), FakePolicy(), make_tasks(1), n=0)
    spec = RolloutSpec(tasks=make_tasks(1))
    with pytest.raises(RolloutError, match=r"^spec\.env: name the environment"):
        run_rollout(spec, policy=FakePolicy())
    with pytest.raises(RolloutError, match=r"^spec\.policy: name the policy"):
        run_rollout(spec, env=lambda: TurnsEnv(1))
    named = RolloutSpec(env="calculator", policy={"name": "expert"}, tasks=make_tasks(1))
    with pytest.raises(RolloutError, match=r"^spec\.env: the environment is passed live too"):
        run_rollout(named, env=lambda: TurnsEnv(1))
    with pytest.raises(RolloutError, match=r"^spec\.policy: the policy is passed live too"):
        run_rollout(named, policy=FakePolicy())
    sample = RolloutSpec(tasks={"count": 2}, policy={"name": "expert"})
    with pytest.raises(RolloutError, match=r"^spec\.tasks: a task sample is drawn from spec\.env"):
        run_rollout(sample, env=lambda: TurnsEnv(1))

    async def inside_loop() -> None:
        run_live(lambda: TurnsEnv(1), FakePolicy(), make_tasks(1))

    with pytest.raises(RolloutError, match="await arun_rollout"):
        asyncio.run(inside_loop())


class Recorder(RolloutHook):
    """Writes down every hook call, with the figures the run had at that moment."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def on_rollout_start(self, run: RolloutRun) -> None:
        self.calls.append(f"start {run.run_id} todo={len(run.todo)} total={run.stats.total}")

    def on_episode_end(self, run: RolloutRun, trajectory: Trajectory) -> None:
        self.calls.append(f"end {trajectory.task.id} done={run.stats.done}")

    def on_rollout_end(self, run: RolloutRun) -> None:
        self.calls.append(f"finish done={run.stats.done}")


def test_hooks_see_the_run_start_each_episode_end_and_the_run_end_even_when_it_fails() -> None:
    calls: list[str] = []
    spec = RolloutSpec(tasks=make_tasks(3), run_id="h", concurrency=1)
    make = lambda: TurnsEnv(1)  # noqa: E731
    trajs = run_rollout(spec, env=make, policy=FakePolicy(), hooks=[Recorder(calls)])
    assert [t.task.id for t in trajs] == ["t0", "t1", "t2"]
    assert calls == [
        "start h todo=3 total=3",
        "end t0 done=1",
        "end t1 done=2",
        "end t2 done=3",
        "finish done=3",
    ]

    class Boom(RolloutHook):
        def on_episode_end(self, run: RolloutRun, trajectory: Trajectory) -> None:
            raise KeyboardInterrupt

    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        run_rollout(spec, env=make, policy=FakePolicy(), hooks=[Boom(), Recorder(calls)])
    assert calls == ["start h todo=3 total=3", "finish done=1"]


def test_a_progress_bar_hook_shows_the_episodes_done() -> None:
    out = io.StringIO()
    bar = RolloutProgress(console=Console(file=out, width=120, force_terminal=True))
    spec = RolloutSpec(tasks=make_tasks(2))
    trajs = asyncio.run(
        arun_rollout(spec, env=lambda: TurnsEnv(1), policy=FakePolicy(), hooks=[bar])
    )
    assert len(trajs) == 2
    assert "rollout" in out.getvalue() and "2/2" in out.getvalue()


def test_the_progress_hook_prints_plain_lines_where_no_bar_can_be_drawn() -> None:
    out = io.StringIO()  # a file, as a run piped to a log has
    hook = RolloutProgress(console=Console(file=out, width=120))
    spec = RolloutSpec(tasks=make_tasks(3))
    asyncio.run(arun_rollout(spec, env=lambda: TurnsEnv(1), policy=FakePolicy(), hooks=[hook]))
    lines = out.getvalue().splitlines()
    # The start and the end (three quick episodes are within one 10 s interval); no bar.
    assert [line.split(" episodes ")[0] for line in lines] == ["rollout 0/3", "rollout 3/3"]
    assert "reward" in lines[-1] and "errors 0" in lines[-1]
    assert "\x1b" not in out.getvalue() and "━" not in out.getvalue()
