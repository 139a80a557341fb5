"""``trajforge judge-eval`` on scripted-expert successes and corrupted failures, checked
against precision/recall/kappa worked out by hand."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.envs.builtin import calculator
from trajforge.envs.play import play
from trajforge.formats.tool_calls import format_tool_call
from trajforge.schema import Outcome, Task, Trajectory
from trajforge.store import TrajectoryStore


def _episode(task: Task, replies: list[str]) -> Trajectory:
    queue = list(replies)
    episode = asyncio.run(
        play(calculator.make_env(), task, lambda t, m: queue.pop(0) if queue else None)
    )
    return Trajectory(
        task=task,
        env="calculator",
        run_id="judged",
        messages=episode.messages,
        outcome=Outcome(reward=episode.reward),
    )


def _answer(task: Task, delta: float = 0) -> str:
    return f"The answer is {calculator.format_number(task.answer + delta)}."


def build_labelled_store(path: Path) -> Path:
    """4 expert successes (label 1); 2 wrong answers, 2 skipped tools, 2 loops (label 0)."""
    tasks = calculator.generate_tasks(10, seed=7, split="test")
    labels = []
    with TrajectoryStore(path) as db:
        for i, task in enumerate(tasks):
            calls = [format_tool_call("calculator", {"expression": s}) for s in task.data["steps"]]
            if i < 4:
                kind, replies = "expert", [*calls, _answer(task)]
            elif i < 6:
                kind, replies = "wrong_answer", [*calls, _answer(task, delta=1)]
            elif i < 8:
                kind, replies = "skipped_tool", [_answer(task)]
            else:
                kind, replies = "loop", [calls[0], calls[0], *calls, _answer(task)]
            traj = _episode(task, replies)
            traj.metadata["corruption"] = kind
            db.add(traj)
            labels.append(
                {"trajectory_id": traj.id, "label": kind == "expert", "env": "calculator"}
            )
    label_file = path.with_suffix(".labels.jsonl")
    label_file.write_text("\n".join(json.dumps(row) for row in labels) + "\n")
    return label_file


@pytest.fixture
def labelled(tmp_path: Path) -> tuple[Path, Path]:
    store = tmp_path / "judged.db"
    return store, build_labelled_store(store)


def _judge_eval(store: Path, labels: Path, scorer: str) -> dict[str, object]:
    result = CliRunner().invoke(
        app,
        [
            "judge-eval",
            "--labels",
            str(labels),
            "--scorer",
            scorer,
            "--store",
            str(store),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_rule_check_is_fooled_by_skipped_tools_and_loops(labelled: tuple[Path, Path]) -> None:
    report = _judge_eval(*labelled, "numeric_match")
    overall = report["overall"]
    assert isinstance(overall, dict)
    # tp = 4 experts; fp = 2 skipped + 2 loops (right number); tn = 2 wrong answers; fn = 0
    assert (overall["true_positive"], overall["false_positive"]) == (4, 4)
    assert (overall["true_negative"], overall["false_negative"]) == (2, 0)
    assert overall["precision"] == pytest.approx(4 / 8)
    assert overall["recall"] == pytest.approx(1.0)
    assert overall["accuracy"] == pytest.approx(6 / 10)
    # p_e = 0.8 * 0.4 + 0.2 * 0.6 = 0.44
    assert overall["kappa"] == pytest.approx((0.6 - 0.44) / (1 - 0.44))


def test_process_metrics_catch_skips_and_loops_but_not_wrong_answers(
    labelled: tuple[Path, Path],
) -> None:
    report = _judge_eval(*labelled, "process")
    overall = report["overall"]
    assert isinstance(overall, dict)
    # tp = 4; fp = 2 wrong answers (clean process); tn = 2 skipped + 2 loops
    assert overall["precision"] == pytest.approx(4 / 6)
    assert overall["recall"] == pytest.approx(1.0)
    assert overall["accuracy"] == pytest.approx(8 / 10)
    per_env = report["per_env"]
    assert isinstance(per_env, dict)
    assert per_env["calculator"]["n"] == 10


def test_judge_rescores_a_run_and_stores_the_scores(labelled: tuple[Path, Path]) -> None:
    store, _ = labelled
    result = CliRunner().invoke(
        app, ["judge", "judged", "--scorer", "numeric_match", "--store", str(store), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["scores"]["numeric_match"] == pytest.approx(8 / 10)
    with TrajectoryStore(store) as db:
        scored = db.query(run="judged", score="numeric_match", min_score=1.0)
    assert len(scored) == 8
    assert {t.metadata["corruption"] for t in scored} == {"expert", "skipped_tool", "loop"}
