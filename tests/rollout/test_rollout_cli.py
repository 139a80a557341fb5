"""``trajforge rollout``: a run, its JSON summary, refusing to reuse a run name, and --resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.errors import ConfigError
from trajforge.store.sqlite import TrajectoryStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def invoke(*args: str) -> dict[str, object]:
    result = CliRunner().invoke(app, ["rollout", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def test_rollout_command_runs_stores_and_resumes(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    common = ["--store", str(db), "--json"]
    summary = invoke(
        "--env",
        "calculator",
        "--model",
        "expert",
        "--tasks",
        "3",
        "--n",
        "2",
        "--run",
        "c",
        *common,
    )
    assert summary["run_id"] == "c" and summary["episodes"] == 6 and summary["stored"] == 6
    assert summary["statuses"] == {"ok": 6, "truncated": 0, "error": 0, "timeout": 0}
    assert summary["mean_reward"] == 1.0

    with pytest.raises(ConfigError, match="already exists"):
        CliRunner().invoke(app, ["rollout", "--run", "c", *common], catch_exceptions=False)

    # Widen the stored run to 5 tasks: a resume runs exactly the 4 missing episodes.
    with TrajectoryStore(db) as store:
        meta = store.get_run("c")
        assert meta is not None
        meta["cli"]["tasks"] = 5
        store.set_run("c", meta)
    resumed = invoke("--resume", "c", *common)
    assert resumed["resumed_from"] == 6 and resumed["episodes"] == 4 and resumed["stored"] == 10
    with TrajectoryStore(db) as store:
        keys = [(t.task.id, t.sample_index) for t in store.query(run="c")]
    assert len(keys) == len(set(keys)) == 10

    again = invoke("--resume", "c", *common)
    assert again["episodes"] == 0 and again["stored"] == 10


def test_rollout_command_shows_a_summary_table(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "rollout",
            "--env",
            "calculator",
            "--model",
            "tiny",
            "--tasks",
            "2",
            "--max-new-tokens",
            "8",
            "--lockstep",
            "--store",
            str(tmp_path / "t.db"),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert (
        "episodes" in result.stdout
        and "2/2" in result.stdout
        and "status truncated" in result.stdout
    )
    assert "lockstep" in result.stdout
