"""Fault injection: tools that raise, hang past the timeout, or SIGKILL their sandbox process."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from rollout_doubles import FakePolicy, FaultyEnv, SandboxCrashed, ToolFailure, make_tasks, run_live
from test_rollout_engine import content_of

from trajforge.rollout import EndReason, Limits
from trajforge.schema import Fault, OutcomeStatus, Role, Trajectory, is_infra_failure

TURNS = 3
RATES = {"p_raise": 0.20, "p_hang": 0.10, "p_kill": 0.05}


def run(faulty: bool, lockstep: bool = False) -> list[Trajectory]:
    rates = RATES if faulty else {}
    return run_live(
        lambda: FaultyEnv(TURNS, fault_seed=11, **rates),
        FakePolicy(),
        make_tasks(50),
        n=4,
        # Generous enough for 200 sandboxes on a loaded machine; a hang sleeps 60 s.
        limits=Limits(tool_timeout_s=3.0, episode_timeout_s=60),
        seed=5,
        run_id="faults",
        lockstep=lockstep,
    )


def expected_fault(traj: Trajectory) -> tuple[int, str] | None:
    """The first (turn, fault) the env's seeded hash assigns to this episode, if any."""
    env = FaultyEnv(TURNS, fault_seed=11, **RATES)
    for turn, msg in enumerate(m for m in traj.messages if m.role is Role.ASSISTANT):
        fault = env.fault(traj.task.id, turn, msg.content + repr(msg.tool_calls))
        if fault is not None:
            return turn, fault
    return None


@pytest.mark.timeout(240)
@pytest.mark.parametrize("lockstep", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_200_episodes_with_faults_all_recorded_statuses_right_healthy_ones_unchanged(
    lockstep: bool,
) -> None:
    clean = run(faulty=False, lockstep=lockstep)
    assert all(t.outcome.status is OutcomeStatus.OK for t in clean)

    start = time.monotonic()
    faulty = run(faulty=True, lockstep=lockstep)
    elapsed = time.monotonic() - start
    assert elapsed < 50  # hung sandboxes were cut at the timeout, not waited for
    assert len(faulty) == 200
    assert [(t.task.id, t.sample_index) for t in faulty] == [
        (f"t{i}", s) for i in range(50) for s in range(4)
    ]
    assert len({t.id for t in faulty}) == 200
    assert not [t.metadata["close_error"] for t in faulty if "close_error" in t.metadata]

    seen: Counter[str] = Counter()
    for got, ref in zip(faulty, clean, strict=True):
        fault = expected_fault(got)
        if fault is None:
            # Healthy: identical to the run without faults (same seeds), message for message.
            assert got.outcome.status is OutcomeStatus.OK
            assert got.outcome.fault is None
            assert content_of(got) == content_of(ref)
            seen["healthy"] += 1
            continue
        turn, kind = fault
        seen[kind] += 1
        assert got.usage.turns == turn + 1
        assert got.messages[-1].role is Role.ASSISTANT and got.messages[-1].tool_calls
        # Everything before the fault matches the clean run.
        assert content_of(got)[: len(got.messages) - 1] == content_of(ref)[: len(got.messages) - 1]
        assert got.outcome.reward is None
        # A tool that raised, hung or lost its process is the infrastructure's failure.
        assert got.outcome.fault is Fault.INFRA and is_infra_failure(got)
        if kind == "raise":
            assert (
                got.outcome.status is OutcomeStatus.ERROR
                and got.outcome.reason == EndReason.ENV_ERROR
            )
            assert got.outcome.error == f"{ToolFailure.__name__}: echo failed on turn {turn}"
        elif kind == "hang":
            assert got.outcome.status is OutcomeStatus.TIMEOUT
            assert got.outcome.reason == EndReason.TOOL_TIMEOUT
        else:
            assert (
                got.outcome.status is OutcomeStatus.ERROR
                and got.outcome.reason == EndReason.ENV_ERROR
            )
            assert (
                got.outcome.error
                == f"{SandboxCrashed.__name__}: sandbox process exited with -9 (signal 9)"
            )
    # Every kind of fault happened, and some episodes stayed healthy.
    assert min(seen.values()) >= 5, seen
    assert sum(seen.values()) == 200
