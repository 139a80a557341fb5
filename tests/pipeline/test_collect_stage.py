"""A ``collect`` stage: an agent program per task against the experiment's model, served."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from trajforge.errors import ConfigError
from trajforge.pipeline.config import load_experiment
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.schema import OutcomeStatus
from trajforge.store import TrajectoryStore

AGENT = f"{sys.executable} {Path(__file__).parents[2] / 'examples' / 'agent_rl' / 'agent.py'}"


def _experiment(tmp_path: Path, model: str, stages: list[dict[str, object]]) -> Path:
    path = tmp_path / "experiment.yaml"
    data = {"name": "agents", "env": "calculator", "model": model, "stages": stages,
            "out_dir": str(tmp_path / "runs")}  # fmt: skip
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_collect_stage_runs_the_agent_and_stores_every_run(tmp_path: Path) -> None:
    stage = {"kind": "collect", "agent": AGENT, "tasks": 2, "n": 2, "timeout_s": 120}
    exp = load_experiment(_experiment(tmp_path, "tiny", [stage]))
    runner = ExperimentRunner(exp, console=Console(quiet=True))
    runner.run()
    results = json.loads((runner.run_dir / "results.json").read_text())
    (record,) = results["stages"]
    assert record["status"] == "done" and record["count"] == 4
    # The random tiny model solves nothing, its replies cut at the agent's max_tokens:
    # truncated, as eval records such a cut.
    assert record["statuses"] == {"truncated": 4} and record["solved"] == 0
    with TrajectoryStore(runner.store_path) as db:
        stored = db.query(run="agents.collect")
    assert len(stored) == 4 and all(t.outcome.status is OutcomeStatus.TRUNCATED for t in stored)
    assert all(t.reward == 0.0 and t.env == "calculator" for t in stored)  # the env's verifier
    assert len({t.group_id for t in stored}) == 2


def test_sft_may_read_a_collect_stage_and_a_collect_stage_needs_weights(tmp_path: Path) -> None:
    collect = {"kind": "collect", "agent": AGENT}
    sft = {"kind": "sft", "demonstrations": "collect", "train": {"max_steps": 1}}
    exp = load_experiment(_experiment(tmp_path, "tiny", [collect, sft]))
    assert [s.kind for s in exp.stages] == ["collect", "sft"]  # its data source is accepted
    expert = load_experiment(_experiment(tmp_path, "expert", [collect]))
    with pytest.raises(ConfigError, match=r"model: a collect stage serves it"):
        ExperimentRunner(expert, console=Console(quiet=True)).run()
    empty = {"kind": "collect", "agent": ""}
    with pytest.raises(ConfigError, match=r"agent"):
        load_experiment(_experiment(tmp_path, "tiny", [empty]))


def test_a_collect_stage_runs_a_command_or_a_harness(tmp_path: Path) -> None:
    both = {"kind": "collect", "agent": AGENT, "harness": "codex"}
    for stage in (both, {"kind": "collect", "confine": True}):
        with pytest.raises(ConfigError, match=r"give agent \(a command\) or harness"):
            load_experiment(_experiment(tmp_path, "tiny", [stage]))
