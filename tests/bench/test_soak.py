"""bench/soak.py at its --quick size: every soak runs its process to the end and prints one
JSON line of RSS figures; a soak over the 1.10 line is named in the exit message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {"soak", "warmup_rss_mb", "end_rss_mb", "peak_rss_mb", "duration_s", "ratio"}


@pytest.mark.slow
def test_every_soak_prints_its_rss_figures() -> None:
    env = os.environ | {"PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "bench/soak.py", "--quick", "--eval-model", "tiny", "--interval", "0.1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["soak"] for r in results] == ["rl", "serve", "viewer", "eval"], done.stderr[-2000:]
    for r in results:
        assert r.keys() >= FIELDS
        assert 0 < r["warmup_rss_mb"] <= r["peak_rss_mb"] and r["end_rss_mb"] <= r["peak_rss_mb"]
        assert r["ratio"] == pytest.approx(r["end_rss_mb"] / r["warmup_rss_mb"], abs=0.002)
    grew = [r["soak"] for r in results if r["ratio"] > 1.10]
    assert done.returncode == (1 if grew else 0), done.stderr[-2000:]
    for name in grew:
        assert f"soak {name}: RSS grew" in done.stderr
