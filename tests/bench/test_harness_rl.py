"""bench/harness_rl.py reads finished runs back from ``OUT/runs.jsonl`` instead of rerunning
them, and sums them up: per seed the held-out success after RL and its gain over SFT, the mean
gain with its Student-t interval, which may reach below 0."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _rl(seed: int, after: float) -> dict[str, object]:
    return {
        "run": f"rl-s{seed}",
        "seed": seed,
        "after_rl": {"success": after, "episodes": 100},
        "validation": [[0, 0.5], [4, 0.7]],
        "kept_step": 4,
        "reward_curve": [0.4, 0.6],
        "stage_s": {"rl": 600.0, "after_rl": 200.0},
        "wall_s": 800.0,
    }


def test_recorded_runs_are_summed_up_not_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sft = {
        "run": "sft",
        "model": "unused",
        "after_sft": {"success": 0.5, "episodes": 100},
        "stage_s": {"after_sft": 100.0},
        "wall_s": 100.0,
    }
    runs = [sft, _rl(0, 0.62), _rl(1, 0.47), _rl(2, 0.53)]
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    # No checkpoint exists at "unused": a run not read back would fail on it.
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.setattr(sys, "argv", ["harness_rl.py", "--sft", "unused", "--out", str(tmp_path)])
    importlib.import_module("harness_rl").main()
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["after_sft"] == 0.5 and result["after_rl"] == [0.62, 0.47, 0.53]
    assert result["gain"] == [0.12, -0.03, 0.03]
    # The gains straddle 0: their interval is not cut there, as one of rates would be.
    low, high = result["mean_gain"]["ci95"]
    assert result["mean_gain"]["mean"] == 0.04 and low < 0 < 0.04 < high
    assert result["ratio"] == round(0.54 / 0.5, 3)
    assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == 4
