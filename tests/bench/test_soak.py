"""``bench/soak.py --quick``: every soak runs its work as a user would and reports its memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # four servers and an RL run, slow on a busy machine
def test_every_soak_runs_at_its_quick_size_and_prints_its_figures() -> None:
    soaks = ["rl", "serve", "viewer", "eval"]
    args = [sys.executable, "bench/soak.py", "--quick", "--eval-model", "tiny"]
    done = subprocess.run(
        [*args, *(f"--soak={name}" for name in soaks)],
        cwd=ROOT, capture_output=True, text=True, timeout=1700,
    )  # fmt: skip
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [line["soak"] for line in lines] == soaks, done.stderr[-2000:]
    for line in lines:
        assert 0 < line["warmup_rss_mb"] <= line["peak_rss_mb"]
        assert 0 < line["end_rss_mb"] <= line["peak_rss_mb"]
        assert line["ratio"] == pytest.approx(line["end_rss_mb"] / line["warmup_rss_mb"], abs=1e-3)
        assert line["samples"] >= 1
    # A quick run is too short to show growth: the exit code follows the ratios alone.
    grew = [line["soak"] for line in lines if line["ratio"] > 1.10]
    assert (done.returncode != 0) == bool(grew)
    for name in grew:
        assert f"soak {name}: RSS grew" in done.stderr
