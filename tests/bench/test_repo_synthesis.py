"""bench/repo_synthesis.py holds out whole functions: in an order set by the seed until they
hold the share asked for, never a function that alone holds more than half of the tasks."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from trajforge.schema import Task

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _tasks(counts: dict[str, int]) -> list[Task]:
    return [
        Task(id=f"{name}-{i}", prompt="fix it", env="repo", data={"file": "m.py", "function": name})
        for name, n in counts.items()
        for i in range(n)
    ]


def test_held_out_functions_reach_the_share_and_skip_a_dominant_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    bench = importlib.import_module("repo_synthesis")
    tasks = _tasks({"big": 30, "a": 4, "b": 4, "c": 4, "d": 4, "e": 4})
    splits = []
    for seed in range(6):
        held = bench.held_out_functions(tasks, seed, share=0.25)
        assert "m.py:big" not in held
        assert sum(4 for _ in held) >= 0.25 * len(tasks)
        assert len(held) == 4  # three hold 12 of the 50 tasks, not yet a quarter
        splits.append(frozenset(held))
    assert len(set(splits)) > 1, "the seed should change which functions are held out"
    assert bench.held_out_functions(tasks, 3, 0.25) == bench.held_out_functions(tasks, 3, 0.25)
