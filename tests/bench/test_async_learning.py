"""bench/async_learning.py reads finished runs back from ``OUT/runs.jsonl`` instead of rerunning
them, and sums them up: per arm the per-seed held-out success with its interval, the mismatch
means, the paired async - sync difference and the ratio."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _run(arm: str, seed: int, held_out: float, kl: float, partial: int) -> dict[str, object]:
    return {
        "arm": arm,
        "seed": seed,
        "held_out": held_out,
        "held_out_episodes": 100,
        "validation": [[0, 0.5], [4, 0.7]],
        "kept_step": 4,
        "reward_curve": [0.3, 0.5],
        "mismatch": {"rollout_kl": kl, "rollout_log_ratio_max": 2.0 + seed},
        "partial_episodes": partial,
        "versioned_episodes": 128,
        "wall_s": 60.0,
    }


def test_recorded_runs_are_summed_up_not_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [
        _run("sync", 0, 0.70, 0.001, 0),
        _run("async", 0, 0.66, 0.003, 8),
        _run("sync", 1, 0.60, 0.001, 0),
        _run("async", 1, 0.68, 0.005, 24),
    ]
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    # In this process (the suite has imported torch already): bench/ on the path, as when the
    # script runs. No SFT checkpoint exists at "unused": a run not read back would fail on it.
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.setattr(
        sys,
        "argv",
        ["async_learning.py", "--sft", "unused", "--seeds", "0", "1", "--out", str(tmp_path)],
    )
    importlib.import_module("async_learning").main()
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    sync, asyn = result["arms"]["sync"], result["arms"]["async"]
    assert sync["held_out"] == [0.70, 0.60] and asyn["held_out"] == [0.66, 0.68]
    assert asyn["mean"] == 0.67 and asyn["ci95"][0] < 0.67 < asyn["ci95"][1]
    assert asyn["mismatch_mean"]["rollout_kl"] == 0.004
    assert asyn["partial_episode_frac"] == round(32 / 256, 4)
    assert result["async_minus_sync"]["seeds"] == 2
    assert result["async_minus_sync"]["mean"] == 0.02
    assert result["ratio"] == round(0.67 / 0.65, 3)
    assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == 4


def test_a_peer_variant_reads_its_own_runs_against_the_same_sync_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    variant = {**_run("async", 0, 0.72, 0.002, 4), "train_overrides": {"epochs_per_step": 1}}
    runs = [_run("sync", 0, 0.70, 0.001, 0), _run("async", 0, 0.66, 0.003, 8), variant]
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    monkeypatch.syspath_prepend(str(BENCH))
    argv = ["async_learning.py", "--sft", "unused", "--seeds", "0", "--out", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", [*argv, "--peer-train", "epochs_per_step=1"])
    importlib.import_module("async_learning").main()
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["peer_train"] == {"epochs_per_step": 1}
    assert result["arms"]["sync"]["held_out"] == [0.70]
    assert result["arms"]["async"]["held_out"] == [0.72]
    monkeypatch.setattr(sys, "argv", [*argv, "--peer-train", "epochs_per_step"])
    with pytest.raises(SystemExit, match="expected KEY=VALUE"):
        importlib.import_module("async_learning").main()
