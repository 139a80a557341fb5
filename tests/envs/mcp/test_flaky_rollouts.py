"""16 concurrent episodes over servers that err, crash, hang or never start: each episode ends
with the right status, and no server process outlives the rollout."""

from __future__ import annotations

import time
from typing import Any

import psutil
import pytest
from flaky_env import calls_task, flaky_env, flaky_spec, scripted

from trajforge.envs.mcp import MCPServerSpec, Scope
from trajforge.policy.naming import load_policy
from trajforge.rollout import Limits, RolloutSpec, run_rollout
from trajforge.schema import Fault, OutcomeStatus, Role, Task, Trajectory, is_infra_failure

EPISODES = 16


def rollout(spec: MCPServerSpec, tasks: list[Task], **fields: Any) -> list[Trajectory]:
    assert len(tasks) == EPISODES
    return run_rollout(
        RolloutSpec(tasks=tasks, concurrency=EPISODES, **fields),
        env=lambda: flaky_env(spec, max_turns=6),
        policy=load_policy("expert", expert=scripted),
    )


def tool_messages(traj: Trajectory) -> list[str]:
    return [m.content for m in traj.messages if m.role is Role.TOOL]


def assert_no_process_left() -> None:
    deadline = time.monotonic() + 10
    while psutil.Process().children(recursive=True) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert psutil.Process().children(recursive=True) == []


KINDS = ["error", "crash", "hang", "fine"]


def mixed_task(i: int) -> Task:
    kind = KINDS[i % len(KINDS)]
    first: dict[str, tuple[str, dict[str, Any]]] = {
        "error": ("fail", {"reason": f"no luck {i}"}),
        "crash": ("crash", {}),
        "hang": ("hang", {}),
        "fine": ("echo", {"text": f"first {i}"}),
    }
    return calls_task(f"{kind}-{i}", first[kind], ("echo", {"text": f"after {i}"}))


def first_result(kind: str, i: int) -> str:
    if kind == "error":
        return f"Error: Error executing tool fail: no luck {i}"
    if kind == "hang":
        return "Error: tool 'hang' timed out after 3 s"
    return f"first {i}"


@pytest.mark.parametrize("scope", [Scope.EPISODE, Scope.SHARED])
def test_errors_crashes_and_hanging_calls_are_tool_messages_and_episodes_go_on(
    scope: Scope, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # A crash of the shared server fails the calls in flight on it too; each episode's own
    # server fails only its own call.
    kinds = KINDS if scope is Scope.EPISODE else ["error", "hang", "fine"]
    tasks = [mixed_task(i) for i in range(EPISODES) if KINDS[i % len(KINDS)] in kinds]
    tasks += [
        calls_task(f"extra-{i}", ("echo", {"text": "x"})) for i in range(EPISODES - len(tasks))
    ]
    trajectories = rollout(flaky_spec(scope=scope, call_timeout_s=3.0), tasks)
    assert [t.outcome.status for t in trajectories] == [OutcomeStatus.OK] * EPISODES
    for i, traj in enumerate(trajectories):
        kind, _, number = traj.task.id.partition("-")
        results = tool_messages(traj)
        if kind == "extra":
            assert results == ["x"]
            continue
        if kind == "crash":
            assert results[0].startswith("Error: MCP server 'flaky'"), results[0]
            assert "is not running: the connection closed" in results[0]
            # The episode went on, and is marked lost to the infrastructure.
            assert traj.outcome.fault is Fault.INFRA and is_infra_failure(traj)
            assert "is not running: the connection closed" in (traj.outcome.error or "")
        else:
            assert results[0] == first_result(kind, int(number)), (i, results)
            assert traj.outcome.fault is None and not is_infra_failure(traj)
        # The episode's next call reaches a server (restarted after a crash).
        assert results[1] == f"after {number}"
    assert_no_process_left()
    # Connections closed from other tasks than opened them would log this (python-sdk #922).
    assert "cancel scope" not in capfd.readouterr().err + caplog.text


def test_servers_that_never_answer_fail_every_episode_within_the_startup_timeout() -> None:
    tasks = [calls_task(f"t{i}", ("echo", {"text": "x"})) for i in range(EPISODES)]
    started = time.monotonic()
    trajectories = rollout(flaky_spec("--hang-on-start", startup_timeout_s=3.0), tasks)
    assert time.monotonic() - started < 60
    assert [t.outcome.status for t in trajectories] == [OutcomeStatus.ERROR] * EPISODES
    for traj in trajectories:
        assert "did not start within 3 s" in (traj.outcome.error or ""), traj.outcome
        assert traj.outcome.fault is Fault.INFRA and is_infra_failure(traj)
    assert_no_process_left()


def test_servers_that_exit_at_start_fail_every_episode_with_their_stderr() -> None:
    tasks = [calls_task(f"t{i}", ("echo", {"text": "x"})) for i in range(EPISODES)]
    trajectories = rollout(flaky_spec("--exit-on-start"), tasks)
    assert [t.outcome.status for t in trajectories] == [OutcomeStatus.ERROR] * EPISODES
    for traj in trajectories:
        assert "refusing to start" in (traj.outcome.error or ""), traj.outcome
        assert traj.outcome.fault is Fault.INFRA and is_infra_failure(traj)
    assert_no_process_left()


def test_episodes_stuck_in_a_call_time_out_and_leave_no_server() -> None:
    # The call timeout far beyond the episode's: the episode's time limit stops the hanging
    # calls. 30 s leaves time for 16 servers to start on two slow cores (at 8 s a 2-core EPYC
    # cut some episodes off before their first call).
    tasks = [calls_task(f"t{i}", ("spawn", {}), ("hang", {})) for i in range(EPISODES)]
    spec = flaky_spec(call_timeout_s=600.0)
    trajectories = rollout(spec, tasks, limits=Limits(episode_timeout_s=30.0))
    assert [t.outcome.status for t in trajectories] == [OutcomeStatus.TIMEOUT] * EPISODES
    assert {t.outcome.reason for t in trajectories} == {"episode_timeout"}
    for traj in trajectories:
        assert tool_messages(traj)[0].isdigit()  # each server spawned a child; it is gone too
    assert_no_process_left()
