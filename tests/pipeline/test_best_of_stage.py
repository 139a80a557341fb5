"""Best-of-N in an experiment's eval stages: checked up front, run with N candidates per task,
the figures in the stage's record."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from rich.console import Console

from trajforge.errors import ConfigError
from trajforge.judge.best_of import BEST_OF_KEY
from trajforge.pipeline.config import check_experiment, load_experiment
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.store import TrajectoryStore


def experiment(tmp_path: Path, env: str, **eval_settings: object) -> Path:
    path = tmp_path / "experiment.yaml"
    data = {
        "name": "bo",
        "env": env,
        "model": "expert",
        "out_dir": str(tmp_path / "runs"),
        "eval": {"tasks": 2, **eval_settings},
        "stages": [{"kind": "eval", "name": "base"}],
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("env", "settings", "message"),
    [
        ("calculator", {"best_of": 2, "select": "verifier", "temperature": 1.0}, "answer key"),
        ("keydoor-compact", {"best_of": 0, "select": "logprob"}, "must be at least 1, got 0"),
        ("keydoor-compact", {"best_of": 2, "select": "vote", "temperature": 1.0}, "unknown"),
        ("keydoor-compact", {"best_of": 2, "select": "logprob"}, "greedy samples"),
        ("keydoor-compact", {"select": "logprob"}, "give --best-of N too"),
        ("keydoor-compact", {"best_of": 2, "n": 2, "select": "logprob"}, "best_of or n"),
    ],
)
def test_a_bad_best_of_is_refused_by_the_check(
    tmp_path: Path, env: str, settings: dict[str, object], message: str
) -> None:
    exp = load_experiment(experiment(tmp_path, env, **settings))
    with pytest.raises(ConfigError) as caught:
        check_experiment(exp, tmp_path / "runs" / "bo")
    assert "eval.best_of" in str(caught.value) and message in str(caught.value)


def test_an_eval_stage_keeps_one_of_n_and_records_the_figures(tmp_path: Path) -> None:
    path = experiment(tmp_path, "keydoor-compact", best_of=3, select="verifier", temperature=1.0)
    runner = ExperimentRunner(load_experiment(path), console=Console(quiet=True))
    results = runner.run()
    (record,) = [s for s in results["stages"] if s["name"] == "base"]
    best = record["best_of"]
    assert (best["n"], best["tasks"], best["selected_at_n"]["value"]) == (3, 2, 1.0)
    assert "selected@3 by verifier (95% CI) 1.000" in record["text"]
    with TrajectoryStore(runner.store_path) as db:
        stored = db.query(run=record["run_id"])
    assert len(stored) == 6
    assert sum(t.metadata[BEST_OF_KEY]["chosen"] for t in stored) == 2
