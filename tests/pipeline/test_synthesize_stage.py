"""The ``synthesize`` stage: its tasks written in the run folder, played by a demonstrations
stage that names it; a ``tasks_from`` that is no earlier synthesize stage, or an env with no
synthesizer, is refused before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from trajforge.envs import TaskSet
from trajforge.errors import ConfigError
from trajforge.pipeline.config import check_experiment, load_experiment
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.store import TrajectoryStore

SYNTH: dict[str, Any] = {"kind": "synthesize", "episodes": 6}
DEMOS: dict[str, Any] = {"kind": "demonstrations", "tasks": 3, "tasks_from": "synthesize"}


def _experiment(tmp_path: Path, stages: list[dict[str, Any]], env: str = "keydoor-compact") -> Path:
    path = tmp_path / "experiment.yaml"
    data = {"name": "syn", "env": env, "model": "expert", "out_dir": str(tmp_path / "runs"),
            "stages": stages}  # fmt: skip
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_demonstrations_stage_plays_the_synthesized_tasks(tmp_path: Path) -> None:
    path = _experiment(tmp_path, [SYNTH, DEMOS])
    results = ExperimentRunner(load_experiment(path), console=Console(quiet=True)).run()
    synth, demos = results["stages"]
    assert (synth["status"], synth["path"], synth["explored"]) == (
        "done",
        "synthesize/tasks.jsonl",
        6,
    )
    assert demos["inputs"].keys() == {"synthesize"}
    run_dir = tmp_path / "runs" / "syn"
    made = {t.id for t in TaskSet.from_jsonl(run_dir / synth["path"])}
    with TrajectoryStore(run_dir / "store.db") as store:
        played = store.query(run=demos["run_id"])
        explored = store.query(run=synth["run_id"])
    assert len(played) == 3 and {t.task.id for t in played} <= made
    assert all(t.outcome.reward == 1.0 for t in played)
    assert len(explored) == 6


def test_a_stage_synthesizes_from_its_own_env_and_the_experiment_plays_them(
    tmp_path: Path,
) -> None:
    # keydoor's boards in keydoor-compact's few tokens: the tasks keep their boards.
    path = _experiment(tmp_path, [{**SYNTH, "env": "keydoor"}, DEMOS])
    results = ExperimentRunner(load_experiment(path), console=Console(quiet=True)).run()
    synth, demos = results["stages"]
    run_dir = tmp_path / "runs" / "syn"
    assert {t.env for t in TaskSet.from_jsonl(run_dir / synth["path"])} == {"keydoor"}
    with TrajectoryStore(run_dir / "store.db") as store:
        explored = store.query(run=synth["run_id"])
        played = store.query(run=demos["run_id"])
    assert {t.env for t in explored} == {"keydoor"}
    assert {t.env for t in played} == {"keydoor-compact"}
    assert len(played) == 3 and all(t.outcome.reward == 1.0 for t in played)
    # Its env is named in the stage's fingerprint: without it, the stage is made again.
    again = ExperimentRunner(
        load_experiment(_experiment(tmp_path, [SYNTH, DEMOS])), console=Console(quiet=True)
    ).run()
    remade = TaskSet.from_jsonl(run_dir / again["stages"][0]["path"])
    assert {t.env for t in remade} == {"keydoor-compact"}


def test_a_stage_env_without_a_synthesizer_is_refused(tmp_path: Path) -> None:
    exp = load_experiment(_experiment(tmp_path, [{**SYNTH, "env": "time"}]))
    with pytest.raises(ConfigError, match="time"):
        check_experiment(exp, tmp_path / "runs" / "syn")


def test_tasks_from_must_be_an_earlier_synthesize_stage(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match="tasks_from 'synthesize' is not an earlier synthesize stage"
    ):
        load_experiment(_experiment(tmp_path, [DEMOS, SYNTH]))


def test_an_env_without_a_synthesizer_is_refused_before_anything_runs(tmp_path: Path) -> None:
    exp = load_experiment(_experiment(tmp_path, [SYNTH], env="time"))
    with pytest.raises(ConfigError, match="env 'time': no task synthesizer"):
        check_experiment(exp, tmp_path / "runs" / "syn")
    assert not (tmp_path / "runs").exists()
