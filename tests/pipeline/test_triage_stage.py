from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from trajforge.errors import ConfigError
from trajforge.pipeline.config import load_experiment
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.store import TrajectoryStore


def _experiment(tmp_path: Path, stages: list[dict[str, object]]) -> Path:
    path = tmp_path / "experiment.yaml"
    data = {
        "name": "tri",
        "env": "calculator",
        "model": "expert",
        "eval": {"tasks": 3},
        "out_dir": str(tmp_path / "runs"),
        "stages": stages,
    }
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.slow
def test_a_triage_stage_stores_verdicts_and_records_the_failure_table(tmp_path: Path) -> None:
    path = _experiment(
        tmp_path,
        [
            {"kind": "eval", "name": "base"},
            {"kind": "demonstrations", "tasks": 4},
            {"kind": "triage"},
        ],
    )
    runner = ExperimentRunner(load_experiment(path), console=Console(quiet=True))
    runner.run()
    results = json.loads((runner.run_dir / "results.json").read_text())
    record = next(s for s in results["stages"] if s["name"] == "triage")
    assert record["status"] == "done"
    assert record["runs"] == ["tri.base", "tri.demonstrations"]
    assert sorted(record["inputs"]) == ["base", "demonstrations"]
    rows = {r["run"]: r for r in record["failures"]}
    assert (rows["tri.base"]["trajectories"], rows["tri.demonstrations"]["trajectories"]) == (3, 4)
    assert rows["all"]["failed"] == 0  # the expert makes no mistake
    with TrajectoryStore(runner.store_path) as st:
        assert st.count(score="triage") == 7
    # Unchanged inputs: the stage is skipped on the next run.
    again = ExperimentRunner(load_experiment(path), console=Console(quiet=True)).run()
    assert next(s for s in again["stages"] if s["name"] == "triage")["attempt"] == 0


def test_a_triage_stage_names_only_earlier_stages_with_trajectories(tmp_path: Path) -> None:
    path = _experiment(
        tmp_path, [{"kind": "triage", "stages": ["base"]}, {"kind": "eval", "name": "base"}]
    )
    with pytest.raises(ConfigError, match="reads 'base', which is not an earlier"):
        load_experiment(path)
    with pytest.raises(ConfigError, match="no earlier stage with trajectories"):
        load_experiment(_experiment(tmp_path, [{"kind": "triage"}]))
