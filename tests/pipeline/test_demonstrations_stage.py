"""A demonstrations stage with a model teacher: its turns are cut at the stage's
``max_new_tokens``, which its fingerprint names only when set (older runs stay current)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from test_synthesize_stage import _experiment

from trajforge.pipeline.config import load_experiment
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.store import TrajectoryStore


def test_a_model_teacher_samples_at_most_max_new_tokens_a_turn(tmp_path: Path) -> None:
    demos = {"kind": "demonstrations", "policy": "tiny", "tasks": 2, "max_turns": 1,
             "max_new_tokens": 3}  # fmt: skip
    path = _experiment(tmp_path, [demos], env="calculator")
    results = ExperimentRunner(load_experiment(path), console=Console(quiet=True)).run()
    (record,) = results["stages"]
    assert record["config"]["stage"]["max_new_tokens"] == 3
    with TrajectoryStore(tmp_path / "runs" / "syn" / "store.db") as store:
        played = store.query(run=record["run_id"])
    replies = [m for t in played for m in t.messages if m.role.value == "assistant"]
    assert len(played) == 2 and replies
    # Generation stops at the limit; the end-of-turn token may close the reply after it.
    assert all(len(m.token_ids or ()) <= 4 for m in replies)
    (tmp_path / "b").mkdir()
    bare = _experiment(tmp_path / "b", [{**demos, "max_new_tokens": None}], env="calculator")
    unset = ExperimentRunner(load_experiment(bare), console=Console(quiet=True))
    assert "max_new_tokens" not in unset._config(0, unset.exp.stages[0])["stage"]
