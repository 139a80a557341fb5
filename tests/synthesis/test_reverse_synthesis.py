"""Reverse task synthesis: a synthesized task's checker (the env's own verifier) accepts the
exploration that reached it and rejects a wrong answer; tasks name the stored exploration
trajectory they came from; a checker that fails its own solution drops the task."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trajforge.envs import Candidate, TaskSet, synthesizer_for
from trajforge.envs.builtin.arith import format_number, safe_eval
from trajforge.errors import ConfigError
from trajforge.policy import load_policy
from trajforge.rollout import RolloutSpec, run_rollout
from trajforge.schema import Message, Role, Task, ToolCall, Trajectory, is_success
from trajforge.store import TrajectoryStore
from trajforge.synthesis import SynthesisSettings, check_by_execution, synthesize
from trajforge.synthesis.explore import explore


def _candidates(env: str, store: Path, episodes: int = 6) -> list[Candidate]:
    synth = synthesizer_for(env)
    settings = SynthesisSettings(episodes=episodes, min_steps=2)
    sources = explore(env, synth, settings, f"explore-{env}", store)
    made = [synth.relabel(t, settings.min_steps) for t in sources]
    return [c for c in made if isinstance(c, Candidate)]


def _reward(env: str, task: Task, replies: tuple[str, ...]) -> tuple[bool, float | None]:
    """Success and reward of ``replies`` played on ``task`` in a fresh env."""

    def reply(task: Task, messages: list[Message]) -> str:
        return replies[sum(1 for m in messages if m.role is Role.ASSISTANT)]

    policy = load_policy("expert", expert=reply, name="replay")
    (done,) = run_rollout(RolloutSpec(env=env, tasks=[task]), policy=policy)
    return is_success(done.outcome.status, done.outcome.reward), done.outcome.reward


@pytest.mark.parametrize("env", ["calculator", "gridworld", "keydoor-compact"])
def test_the_checker_accepts_the_source_and_rejects_a_wrong_answer(
    env: str, tmp_path: Path
) -> None:
    candidates = _candidates(env, tmp_path / "store.db")
    assert candidates
    task, solution, wrong = candidates[0].task, candidates[0].solution, candidates[0].wrong
    assert _reward(env, task, solution) == (True, 1.0)
    assert _reward(env, task, (*wrong, *[wrong[-1]] * 20))[0] is False
    with TrajectoryStore(tmp_path / "store.db") as store:
        source = store.get(task.data["synthesis"]["source"])
    assert source.run_id == f"explore-{env}"
    assert source.task.id == task.data["synthesis"]["start_task"]


def test_calculator_task_tells_the_explorers_calls_as_a_word_problem(tmp_path: Path) -> None:
    candidates = _candidates("calculator", tmp_path / "store.db", episodes=12)
    assert len(candidates) == 12
    for candidate in candidates:
        task, steps = candidate.task, candidate.task.data["steps"]
        assert len(steps) >= 2
        assert not set("+-*/") & set(task.prompt), task.prompt
        results = {safe_eval(s) for s in steps}
        for step in steps:
            left, _, right = step.split()
            # A number the story gives, not one the tool worked out, is in its words.
            for number in (left, right):
                assert float(number) in results or re.search(rf"\b{number}\b", task.prompt)
        assert task.prompt.endswith("?")
        assert candidate.solution[-1] == f"The answer is {task.answer}."
        assert candidate.wrong[-1] == f"The answer is {task.answer + 1}."


def test_calls_that_do_not_build_on_the_running_number_make_no_task() -> None:
    calls = ["12 * 3", "50 + 2", "9 * 9"]
    messages = [Message(role=Role.USER, content="explore")]
    for i, expression in enumerate(calls):
        call = ToolCall(id=f"c{i}", name="calculator", arguments={"expression": expression})
        messages += [
            Message(role=Role.ASSISTANT, content="", tool_calls=[call]),
            Message(
                role=Role.TOOL, content=format_number(safe_eval(expression)), tool_call_id=f"c{i}"
            ),
        ]
    source = Trajectory(task=Task(id="t", prompt="explore", env="calculator"), messages=messages)
    made = synthesizer_for("calculator").relabel(source, min_steps=2)
    assert made == "the calls are not moves a story can tell"


def test_a_task_whose_checker_rejects_its_own_solution_is_dropped(tmp_path: Path) -> None:
    good = _candidates("calculator", tmp_path / "store.db")[0]
    wrong_answer = good.task.model_copy(update={"id": "tampered", "answer": good.task.answer + 7})
    tampered = Candidate(wrong_answer, good.solution, good.wrong)
    kept, dropped = check_by_execution("calculator", [good, tampered])
    assert [t.id for t in kept] == [good.task.id]
    assert dropped == {"its checker rejects the exploration's own solution": 1}


def test_synthesize_writes_distinct_checked_tasks_with_provenance(tmp_path: Path) -> None:
    out = tmp_path / "tasks.jsonl"
    report = synthesize(
        "gridworld",
        SynthesisSettings(episodes=8),
        run_id="explore",
        store=tmp_path / "s.db",
        out=out,
    )
    tasks = list(TaskSet.from_jsonl(out))
    assert [t.id for t in tasks] == [t.id for t in report.tasks]
    assert len({t.id for t in tasks}) == len(tasks) > 0
    assert report.explored == 8 == len(tasks) + sum(report.dropped.values())
    assert all(t.env == "gridworld" and t.split == "train" for t in tasks)
    assert all(t.data["shortest"] >= 3 for t in tasks)
    with TrajectoryStore(tmp_path / "s.db") as store:
        stored = {t.id for t in store.query(run="explore")}
    assert len(stored) == 8
    assert {t.data["synthesis"]["source"] for t in tasks} <= stored


def test_the_difficulty_band_keeps_tasks_by_a_policys_pass_rate(tmp_path: Path) -> None:
    settings = SynthesisSettings(episodes=6, difficulty_policy="expert", samples=1, band=(1.0, 1.0))
    report = synthesize(
        "calculator", settings, run_id="e", store=tmp_path / "s.db", out=tmp_path / "a.jsonl"
    )
    assert report.tasks and all(t.data["synthesis"]["pass_rate"] == 1.0 for t in report.tasks)
    hard = settings.model_copy(update={"band": (0.0, 0.5)})
    with pytest.raises(ConfigError, match="no task of calculator survived"):
        synthesize(
            "calculator", hard, run_id="e2", store=tmp_path / "s.db", out=tmp_path / "b.jsonl"
        )
    assert not (tmp_path / "b.jsonl").exists()


def test_calculator_synthesis_writes_the_same_tasks_when_run_again(tmp_path: Path) -> None:
    first = _candidates("calculator", tmp_path / "a.db", episodes=8)
    again = _candidates("calculator", tmp_path / "b.db", episodes=8)
    assert [c.task.id for c in first] == [c.task.id for c in again]
    assert [c.task.prompt for c in first] == [c.task.prompt for c in again]
