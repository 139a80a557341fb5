"""bench/test_time.py --quick end to end: the tiny model, a few boards, every figure present
with its interval and the headline JSON line last."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench_run import result_of, run_bench


@pytest.mark.slow
def test_quick_mode_prints_every_figure_and_one_json_line(tmp_path: Path) -> None:
    done = run_bench("test_time.py", "--quick", "--out", str(tmp_path))
    lines = done.stdout.strip().splitlines()
    result = result_of(done)
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
