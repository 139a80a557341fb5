"""bench/test_time.py --quick end to end: the tiny model, a few boards, every figure present
with its interval and the headline JSON line last."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "test_time.py"


@pytest.mark.slow
def test_quick_mode_prints_every_figure_and_one_json_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parents[1] / "src")}
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert (result["bench"], result["model"], result["tasks"], result["n"]) == (
        "test_time",
        "tiny",
        4,
        2,
    )
    for key in ("pass_at_1_greedy", "pass_at_1_sampled", "pass_at_2", "memory_off", "memory_on"):
        rate = result[key]
        assert rate["low"] <= rate["value"] <= rate["high"]
    assert set(result["selected_at_2"]) == {"verifier", "logprob", "majority"}
    assert result["memory_items"] == 4  # one item per training episode, with its provenance
    assert "ratio" in result
    assert (tmp_path / "memory.jsonl").is_file()
    assert any(line.startswith("selected@2 by verifier") for line in lines)
