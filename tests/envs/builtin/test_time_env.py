"""The built-in ``time`` environment: its tool comes from the MCP time server."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import psutil
import pytest

import trajforge
from trajforge.envs.builtin import time_env
from trajforge.rollout import PolicyRef, RolloutSpec, TaskSample, run_rollout
from trajforge.schema import Message, OutcomeStatus, Role
from trajforge.schema.evidence import Evidence
from trajforge.store import TrajectoryStore

TRAJFORGE = str(Path(sys.executable).with_name("trajforge"))


def test_tasks_are_deterministic_and_answers_hold_on_any_day() -> None:
    tasks = time_env.generate_tasks(40, seed=3)
    assert tasks == time_env.generate_tasks(40, seed=3)
    assert len({t.id for t in tasks}) == 40
    assert not {t.id for t in tasks} & {t.id for t in time_env.generate_tasks(10, split="test")}
    for task in tasks:
        call = task.data["call"]
        hour, minute = map(int, call["time"].split(":"))
        for day in (datetime(2026, 1, 15), datetime(2026, 7, 15)):
            source = day.replace(hour=hour, minute=minute, tzinfo=ZoneInfo(call["source_timezone"]))
            target = source.astimezone(ZoneInfo(call["target_timezone"]))
            assert target.strftime("%H:%M") == task.answer


def test_the_verifier_reads_the_last_clock_time_of_the_final_answer() -> None:
    task = time_env.generate_tasks(1)[0]
    hour, minute = task.answer.split(":")

    def said(text: str) -> float:
        return time_env.verify(Evidence(task, [Message(role=Role.ASSISTANT, content=text)]))

    assert said(f"The answer is {task.answer}.") == 1.0
    assert said(f"The answer is {int(hour)}:{minute}.") == 1.0
    assert said("The answer is 25:99.") == 0.0
    assert said("I do not know.") == 0.0


def test_the_expert_solves_every_task_through_the_mcp_server() -> None:
    spec = RolloutSpec(
        env="time",
        policy=PolicyRef(name="expert"),
        tasks=TaskSample(count=16),
        concurrency=16,
        seed=1,
    )
    trajectories = run_rollout(spec)
    assert [t.outcome.status for t in trajectories] == [OutcomeStatus.OK] * 16
    assert [t.outcome.reward for t in trajectories] == [1.0] * 16
    for traj in trajectories:
        tool = next(m for m in traj.messages if m.role is Role.TOOL)
        assert '"target"' in tool.content and not tool.content.startswith("Error:")
        assert [t.name for t in traj.tools] == ["convert_time"]
    assert psutil.Process().children(recursive=True) == []


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_embedded_model_rollout_on_the_time_env_is_token_exact(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    # The command runs this checkout's source, whatever the installed package points at.
    env = {**os.environ, "PYTHONPATH": str(Path(trajforge.__file__).parents[1])}
    rollout = [TRAJFORGE, "rollout", "--env", "time", "--model", "embedded", "--tasks", "2"]
    options = ["--temperature", "0", "--max-new-tokens", "64", "--run", "mcp", "--store", db]
    done = subprocess.run(
        [*rollout, *options], env=env, capture_output=True, text=True, timeout=540
    )
    assert done.returncode == 0, done.stderr
    with TrajectoryStore(db) as store:
        trajectories = store.query(run="mcp")
    assert len(trajectories) == 2
    # The server's tool, with its own schema, is part of what the model was shown.
    assert all([t.name for t in traj.tools] == ["convert_time"] for traj in trajectories)
    check = subprocess.run(
        [TRAJFORGE, "check", "--store", db, "--run", "mcp"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "checked 2 trajectories: all token-exact" in check.stdout
