"""A standalone ``trajforge train`` run's ``results.json``: one stage in the experiment format,
its whole history (resumed parts included), and a report with its curves."""

from __future__ import annotations

import json
import re
from pathlib import Path

from trajforge.pipeline.train_results import STANDALONE_KIND, StandaloneRun, read_history, rl_detail
from trajforge.report.html import build_report
from trajforge.store import TrajectoryStore
from trajforge.train.base import TrainResult
from trajforge.train.config import RLConfig, SFTConfig
from trajforge.train.interrupted import TrainingInterrupted
from trajforge.viewer.curves import run_folder_curves


def _logged(out: Path, steps: range, **metrics: float) -> list[dict[str, float]]:
    """``metrics.jsonl`` of ``steps`` in ``out``, as the metrics logger writes it."""
    out.mkdir(parents=True, exist_ok=True)
    history = [{"step": s, **{k: v / s for k, v in metrics.items()}} for s in steps]
    (out / "metrics.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))
    return history


def _images(html: str) -> list[str]:
    return re.findall(r'<img src="data:image/png;base64,[^"]+" alt="([^"]+)"', html)


def test_a_finished_sft_run_records_its_whole_history_and_reports_its_loss(tmp_path: Path) -> None:
    out = tmp_path / "sft1"
    cfg = SFTConfig.model_validate(
        {"output_dir": out, "data": {"jsonl": tmp_path / "d.jsonl", "env": "calculator"}}
    )
    run = StandaloneRun("sft", cfg)
    history = _logged(out, range(1, 5), loss=2.0)
    # This call resumed at step 3: its own history has the last two steps only.
    result = TrainResult(4, history[2:], out / "final", resumed_from=2, precision="fp32")
    results = json.loads(run.finished(result).read_text())
    assert results["kind"] == STANDALONE_KIND and results["env"] == "calculator"
    assert results["store"] is None and results["precision"]["resolved"] == "fp32"
    (stage,) = results["stages"]
    assert stage["status"] == "done" and stage["kind"] == "sft" and stage["steps"] == 4
    assert stage["history"] == history  # the whole run, not the resumed call's two steps
    assert stage["config"]["output_dir"] == str(out) and stage["duration_s"] >= 0
    assert stage["model"] == str(out / "final")
    assert stage["text"] == "4 steps, final loss 0.500"

    html = build_report(out).read_text()
    assert _images(html) == ["sft loss per step"]
    assert 'id="results"' not in html  # no eval stage: no empty results table
    assert "view-command" not in html  # no store: nothing for the viewer to show
    assert "<b>sft</b> (sft): 4 steps, final loss 0.500" in html


def test_an_interrupted_run_reports_how_far_it_got(tmp_path: Path) -> None:
    out = tmp_path / "dpo1"
    cfg = SFTConfig.model_validate({"output_dir": out, "data": {"jsonl": tmp_path / "d.jsonl"}})
    history = _logged(out, range(1, 3), loss=1.0)
    stop = TrainingInterrupted("dpo", 2, 5, None, out)
    results = json.loads(StandaloneRun("dpo", cfg).interrupted(stop, "bf16").read_text())
    (stage,) = results["stages"]
    assert stage["status"] == "failed" and stage["history"] == history
    assert stage["text"] == "interrupted: stopped at step 2 of 5" and stage["model"] is None
    assert results["precision"]["resolved"] == "bf16"
    assert _images(build_report(out).read_text()) == ["dpo loss per step"]


def test_an_rl_run_names_its_store_and_its_folder_is_one_stage_of_curves(tmp_path: Path) -> None:
    store = tmp_path / "rollouts.db"
    TrajectoryStore(store).close()
    out = tmp_path / "rl1"
    cfg = RLConfig.model_validate({"output_dir": out, "store": store, "env": "calculator"})
    _logged(out, range(1, 4), loss=1.0, reward_mean=0.3)
    result = TrainResult(3, read_history(out) or [], out / "final")
    results = json.loads(StandaloneRun("rl", cfg).finished(result).read_text())
    assert results["store"] == str(store.resolve()) and results["env"] == "calculator"
    assert results["stages"][0]["text"].startswith("3 steps, train reward 0.30 -> 0.10")
    html = build_report(out).read_text()
    assert _images(html) == ["rl reward per step", "rl loss per step"]
    assert "view-command" in html
    curves = run_folder_curves(out)
    assert {(c.stage, c.name) for c in curves} == {("rl1", "loss"), ("rl1", "reward_mean")}


def test_an_rl_summary_counts_the_steps_that_trained_nothing() -> None:
    history = [
        {"step": 1, "reward_mean": 1.0, "zero_adv_frac": 1.0},
        {"step": 2, "reward_mean": 0.5, "zero_adv_frac": 0.5},
        {"step": 3, "reward_mean": 1.0, "zero_adv_frac": 1.0},
    ]
    detail = rl_detail(TrainResult(steps=3, history=history))
    assert detail.endswith(", 2 of 3 steps trained nothing (no group had an advantage)")
    assert "trained nothing" not in rl_detail(TrainResult(steps=1, history=history[1:2]))
