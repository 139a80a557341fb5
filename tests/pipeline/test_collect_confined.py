"""Confined agent runs in an experiment's ``collect`` stage: the same program the ``trajforge
collect --confine`` command runs, recorded in the run's metadata as it records it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from trajforge.envs.sandbox import sandbox_available
from trajforge.pipeline.config import load_experiment
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.store import TrajectoryStore

sys.path.insert(0, str(Path(__file__).parents[1] / "agent_programs"))

from confined_runs import AGENT, assert_confined_metadata, confined_tasks

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap cannot run here")


def test_a_collect_stage_confines_its_runs_and_records_how(tmp_path: Path) -> None:
    stage = {"kind": "collect", "agent": AGENT, "confine": True, "tasks": 1, "timeout_s": 120}
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump({"name": "agents", "env": str(confined_tasks(tmp_path, 1)),
                                    "model": "tiny", "stages": [stage],
                                    "out_dir": str(tmp_path / "runs")}))  # fmt: skip
    runner = ExperimentRunner(load_experiment(path), console=Console(quiet=True))
    runner.run()
    (record,) = json.loads((runner.run_dir / "results.json").read_text())["stages"]
    assert record["status"] == "done" and record["count"] == 1
    with TrajectoryStore(runner.store_path) as db:
        (traj,) = db.query(run="agents.collect")
        meta = db.get_run("agents.collect")
    assert traj.reward == 1.0  # the program saw the sandbox's home
    assert_confined_metadata(meta)
    assert meta is not None and meta["spec"]["n"] == 1
