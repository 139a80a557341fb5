"""bench/repo_synthesis.py holds out whole functions: in an order set by the seed until they
hold the share asked for, never a function that alone holds more than half of the tasks."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from trajforge.schema import Message, Role, Task, ToolCall, Trajectory
from trajforge.store import TrajectoryStore

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


def test_edits_that_change_nothing_are_counted_apart(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    bench = importlib.import_module("repo_synthesis")

    def episode(run_id: str, old: str, new: str) -> Trajectory:
        call = ToolCall(id="c0", name="edit_file", arguments={"path": "m.py", "old": old, "new": new})  # fmt: skip
        return Trajectory(run_id=run_id, env="repo", task=Task(id="t", prompt="fix it"),
                          messages=[Message(role=Role.USER, content="fix it"),
                                    Message(role=Role.ASSISTANT, tool_calls=[call]),
                                    Message(role=Role.TOOL, content="m.py: replaced 1 occurrence", tool_call_id="c0", name="edit_file")])  # fmt: skip

    with TrajectoryStore(tmp_path / "store.db") as store:
        store.add(episode("repo.after_sft", "x < 1", "x < 1"))
        store.add(episode("repo.after_sft", "x < 1", "x <= 1"))
        store.add(episode("repo.base", "y", "y"))
    assert bench._edits(tmp_path / "store.db", "repo.after_sft") == {
        "edit_calls": 2,
        "unchanged": 1,
    }
