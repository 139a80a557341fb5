"""Stages know what they were made from: a changed setting re-runs its stage and everything
downstream (and says why), upstream is skipped, ``--stage`` marks downstream stale."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from test_runner import TINY_EXPERIMENT, TOY_RUN_BYTES, write_experiment

from trajforge.pipeline.attempts import disk_use
from trajforge.pipeline.config import load_experiment
from trajforge.pipeline.fingerprint import next_attempt, resolved, what_changed
from trajforge.pipeline.runner import ExperimentRunner


def _run(experiment: Path, overrides: list[str], only: str | None = None) -> str:
    out = io.StringIO()
    runner = ExperimentRunner(
        load_experiment(experiment, overrides), console=Console(file=out, width=300)
    )
    runner.run(only=only)
    return out.getvalue()


def _stages(experiment: Path) -> dict[str, dict[str, Any]]:
    results = json.loads((experiment.parent / "runs" / "tiny" / "results.json").read_text())
    return {s["name"]: s for s in results["stages"]}


def test_what_changed_names_inputs_first_then_settings() -> None:
    rec = {"config": {"train": {"max_steps": 2, "lr": 1}}, "inputs": {"sft": "a"}}
    assert what_changed(rec, rec["config"], {"sft": "a"}) is None
    assert what_changed(rec, rec["config"], {"sft": "b"}) == "sft, which it uses, changed"
    assert what_changed(rec, {"train": {"max_steps": 8, "lr": 1}}, {"sft": "a"}) == (
        "its settings changed: train.max_steps: 2 -> 8"
    )
    assert "records no config" in str(what_changed({}, {}, {}))


def test_next_attempt_skips_resumes_or_makes_anew() -> None:
    done = {"attempt": 1, "status": "done"}
    assert next_attempt(None, None, None) == (0, "")
    assert next_attempt(done, None, None) == (1, None)
    assert next_attempt(done, "x changed", None) == (2, "made again: x changed")
    assert next_attempt(done, None, "sft") == (2, "made again, as --stage asks")
    assert next_attempt({"attempt": 1, "status": "failed"}, None, None)[0] == 1
    assert next_attempt({"attempt": 1, "status": "failed"}, "x", None)[0] == 2


def test_resolved_writes_the_run_folder_as_a_placeholder(tmp_path: Path) -> None:
    config = {"model": str(tmp_path / "sft" / "final"), "other": str(tmp_path) + "2"}
    out = resolved(config, tmp_path)
    assert out["model"] == "<run>/sft/final" and out["other"] == str(tmp_path) + "2"
    assert "trajforge" in out


@pytest.mark.slow
def test_a_changed_setting_reruns_its_stage_and_downstream_only(tmp_path: Path) -> None:
    experiment = write_experiment(tmp_path, TINY_EXPERIMENT)
    _run(experiment, [])
    first = _stages(experiment)
    assert first["sft"]["config"]["train"]["max_steps"] == 2
    assert first["sft"]["config"]["train"]["model"]["spec"] == "tiny"

    said = _run(experiment, [])
    assert said.count("done, unchanged") == 6 and _stages(experiment) == first

    said = _run(experiment, ["stages.sft.train.max_steps=3"])
    again = _stages(experiment)
    for name in ("base", "demonstrations"):
        assert again[name] == first[name]
    assert "sft: made again: its settings changed: train.max_steps: 2 -> 3" in said
    assert "after_sft: made again: sft, which it uses, changed" in said
    assert "rl: made again: sft, which it uses, changed" in said
    assert "after_rl: made again: rl, which it uses, changed" in said
    assert len(again["sft"]["history"]) == 3 and again["sft"]["attempt"] == 1
    assert again["after_sft"]["model"] == again["sft"]["model"]
    # The stage's folder holds its current attempt; the one before is set aside, and the
    # weights downstream stages were made from are named by the same path.
    run_dir = experiment.parent / "runs" / "tiny"
    assert again["sft"]["model"] == str(run_dir / "sft" / "final")
    assert not (run_dir / "sft.1").exists()
    assert sorted(p.name for p in (run_dir / ".attempts").iterdir()) == ["rl.0", "sft.0"]
    assert (run_dir / ".attempts" / "sft.0" / "final" / "config.json").is_file()
    assert not (run_dir / ".attempts" / "sft.0" / "checkpoints").exists()
    assert "sft: its attempt 0 moved to .attempts/sft.0" in said
    assert again["rl"]["config"]["train"]["model"]["spec"] == "<run>/sft/final"
    assert again["after_rl"]["model"] == again["rl"]["model"]
    assert again["after_rl"]["run_id"] == "tiny.after_rl.1"

    # --stage sft makes sft anew; what used the earlier sft is stale, shown so, then remade.
    said = _run(experiment, ["stages.sft.train.max_steps=3"], only="sft")
    marked = _stages(experiment)
    assert marked["sft"]["attempt"] == 2
    assert [n for n, s in marked.items() if s["status"] == "stale"] == [
        "after_sft", "rl", "after_rl",
    ]  # fmt: skip
    assert marked["after_rl"]["stale"] == "rl, which it uses, changed (by --stage sft)"
    assert "stale (made from what has changed since): after_sft, rl, after_rl" in said
    report = (experiment.parent / "runs" / "tiny" / "report.html").read_text()
    assert "after_sft (stale)" in report and "after_rl (stale)" in report
    said = _run(experiment, ["stages.sft.train.max_steps=3"])
    final = _stages(experiment)
    assert all(s["status"] == "done" for s in final.values())
    assert final["after_rl"]["attempt"] == 2 and final["sft"]["attempt"] == 2
    assert final["rl"]["config"]["train"]["model"]["spec"] == "<run>/sft/final"
    # keep_attempts (1 by default): only the attempt just before the current one stays.
    assert sorted(p.name for p in (run_dir / ".attempts").glob("sft.*")) == ["sft.1"]
    assert sorted(p.name for p in (run_dir / ".attempts").glob("rl.*")) == ["rl.1"]
    # Three attempts of sft and rl take little more than one: the attempts set aside keep
    # their final weights only, not a whole folder with its checkpoints each.
    assert disk_use(run_dir) < TOY_RUN_BYTES + 40_000_000

    # A run folder moved elsewhere (and named by --out) holds the same stages: its training
    # stages' weights are found in it, not where they were recorded.
    moved = tmp_path / "elsewhere"
    run_dir.rename(moved)
    out = io.StringIO()
    runner = ExperimentRunner(
        load_experiment(experiment, ["stages.sft.train.max_steps=3"]),
        run_dir=moved,
        console=Console(file=out, width=300),
    )
    runner.run()
    assert out.getvalue().count("done, unchanged") == 6, out.getvalue()
    assert runner.weights("sft") == str(moved / "sft" / "final")
    assert runner.weights("rl") == str(moved / "rl" / "final")
    with pytest.raises(ValueError, match="'after_sft' has no finished weights"):
        runner.weights("after_sft")
