"""An agent program's runs told a memory's lessons: every call of a run's session carries them
in its system message, so its calls still continue one token-exact trajectory, and the
trajectory records what was retrieved."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from serve_helpers import assert_token_exact, recorded

from trajforge.agent_programs import AgentRunner
from trajforge.rollout import Limits, RolloutSpec, run_rollout
from trajforge.schema import Role, Task
from trajforge.serve.gateway import Gateway

AGENT = f"{sys.executable} {Path(__file__).parent / 'agent_program.py'}"
LESSON = "Lessons from earlier attempts:\n1. add twice: call add for each pair"


def _told(task: Task) -> tuple[str | None, dict[str, Any]]:
    if task.id == "t1":  # nothing retrieved for this task: nothing is added
        return None, {"memory": {"items": []}}
    return f"{LESSON} ({task.id})", {"memory": {"items": [{"id": f"m-{task.id}"}]}}


def test_each_call_carries_the_lessons_and_continues_one_trajectory(
    gateway: Gateway, tmp_path: Path
) -> None:
    tasks = [
        Task(id=f"t{k}", prompt=f"Add {k} and {k + 1} and {2 * k}?", answer=4 * k + 1,
             data={"reward": "post"})
        for k in range(3)
    ]  # fmt: skip
    store = tmp_path / "gateway.db"
    spec = RolloutSpec(tasks=tasks, limits=Limits(episode_timeout_s=30), run_id="gw", store=store)
    runs = run_rollout(spec, runner=AgentRunner(AGENT, gateway=gateway, told=_told))
    assert all(r.reward == 1.0 for r in runs)
    stored = {t.task.id: t for t in recorded(store)}
    assert sorted(stored) == ["t0", "t1", "t2"]  # one trajectory per run: every call continued
    for task_id in ("t0", "t2"):
        trajectory = stored[task_id]
        first = trajectory.messages[0]
        assert first.role is Role.SYSTEM and first.content == f"{LESSON} ({task_id})"
        assert [m.role for m in trajectory.messages[1:3]] == [Role.USER, Role.ASSISTANT]
        assert trajectory.num_turns >= 2  # the program called the model again after a tool
        assert trajectory.metadata["memory"] == {"items": [{"id": f"m-{task_id}"}]}
    assert stored["t1"].messages[0].role is Role.USER
    assert stored["t1"].metadata["memory"] == {"items": []}
    assert_token_exact(store)
