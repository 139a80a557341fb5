from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.store import TrajectoryStore


def test_eval_rolls_out_scores_and_summarises(tmp_path: Path) -> None:
    store = tmp_path / "eval.db"
    args = ["eval", "--env", "calculator", "--model", "expert", "--tasks", "4", "--n", "2"]
    result = CliRunner().invoke(app, [*args, "--run", "ev", "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["episodes"] == 8
    assert summary["tasks"] == 4
    assert summary["success"] == 1.0
    assert summary["pass_at"] == {"1": 1.0, "2": 1.0}
    assert summary["reward_ci_low"] == summary["reward_ci_high"] == 1.0
    assert summary["scores"] == {"env_verifier": 1.0, "process": 1.0}
    with TrajectoryStore(store) as db:
        stored = db.query(run="ev")
        assert len(stored) == 8
        assert all(t.score("process") is not None for t in stored)
        assert db.get_run("ev")["summary"]["success"] == 1.0  # type: ignore[index]


def test_eval_with_an_unknown_scorer_names_it(tmp_path: Path) -> None:
    args = ["eval", "--env", "calculator", "--model", "expert", "--scorer", "nope"]
    result = CliRunner().invoke(app, [*args, "--store", str(tmp_path / "x.db")])
    assert result.exit_code != 0
    assert "unknown scorer 'nope'" in str(result.exception)
