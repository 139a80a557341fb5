"""The main job's imperfect teacher (examples/calculator/teacher.py) through the real rollout."""

from __future__ import annotations

from pathlib import Path

from trajforge.pipeline.config import DemonstrationStage, load_experiment
from trajforge.rollout import Limits, PolicyRef, RolloutSpec, TaskSample, run_rollout
from trajforge.schema import Role
from trajforge.schema.answers import final_answer

EXAMPLE = Path(__file__).parents[2] / "examples" / "calculator"
TEACHER = f"script:{EXAMPLE / 'teacher.py'}:shortcut_expert"


def test_the_teacher_answers_most_two_step_problems_in_its_head_and_is_always_right() -> None:
    spec = RolloutSpec(
        env="calculator",
        policy=PolicyRef(name=TEACHER),
        tasks=TaskSample(count=320, split="train"),
        limits=Limits(max_turns=6),
    )
    trajectories = run_rollout(spec)
    assert len(trajectories) == 320
    assert all(t.outcome.reward == 1.0 for t in trajectories)
    calls: dict[int, list[int]] = {2: [], 3: []}
    for t in trajectories:
        steps = len(t.task.data["steps"])
        calls[steps].append(sum(1 for m in t.messages if m.role is Role.TOOL))
        assert final_answer(t.messages)
    # Three-step problems: always one call per step. Two-step: none (the shortcut) or two.
    assert set(calls[3]) == {3}
    assert set(calls[2]) == {0, 2}
    shortcut = calls[2].count(0) / len(calls[2])
    assert 0.6 < shortcut < 0.8


def test_the_main_job_learns_from_the_teacher() -> None:
    exp = load_experiment(EXAMPLE / "experiment.yaml")
    (demos,) = [s for s in exp.stages if isinstance(s, DemonstrationStage)]
    assert demos.policy == "script:examples/calculator/teacher.py:shortcut_expert"
    assert exp.eval.tasks >= 100
