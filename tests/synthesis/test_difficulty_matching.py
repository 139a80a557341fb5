"""Difficulty matching: the synthesized tasks kept mix by the expert's solution length as the
reference's do, closer to it than the tasks synthesis made before matching."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajforge.envs import TaskSet
from trajforge.envs.builtin.keydoor import KeyBoard
from trajforge.envs.registry import get_env
from trajforge.errors import ConfigError
from trajforge.schema import Task
from trajforge.synthesis import SynthesisSettings, synthesize
from trajforge.synthesis.difficulty import length_groups, match_difficulty, match_reference


def _share_up_to(lengths: list[int], most: int) -> float:
    return sum(n <= most for n in lengths) / len(lengths)


def _distance(lengths: list[int], reference: list[int]) -> float:
    """Wasserstein-1 distance between two empirical distributions of lengths."""
    top = max(*lengths, *reference)
    return sum(abs(_share_up_to(lengths, v) - _share_up_to(reference, v)) for v in range(top + 1))


def _tasks(lengths: list[int]) -> tuple[list[Task], dict[str, int]]:
    tasks = [Task(id=f"t{i}", prompt="p") for i in range(len(lengths))]
    return tasks, {t.id: n for t, n in zip(tasks, lengths, strict=True)}


def test_the_reference_is_cut_into_runs_of_at_least_a_quarter() -> None:
    reference = [6] * 10 + [7] * 15 + [8] * 10 + [9] * 5 + [10] * 40 + [12] * 4
    # 6-7 (25), 8-9 (15, short of 21: grows on to 10), then 12 alone (4) joins the last run
    assert length_groups(reference) == [(6, 7, 25 / 84), (8, 12, 59 / 84)]
    assert length_groups([5, 5, 5]) == [(5, 5, 1.0)]


def test_matching_keeps_each_runs_share_and_drops_what_the_reference_never_asks() -> None:
    reference = [6, 7, 8, 9, 10, 11, 12, 12] * 5
    pool = [3] * 30 + [6] * 20 + [7] * 20 + [8] * 15 + [9] * 10 + [10] * 6 + [12] * 4 + [15] * 3
    tasks, lengths = _tasks(pool)
    kept = match_difficulty(tasks, lengths, reference, seed=0, key="match")
    matched = [lengths[t.id] for t in kept]
    assert min(matched) >= 6 and max(matched) <= 12
    assert _distance(matched, reference) < _distance(pool, reference) / 3
    assert kept == sorted(kept, key=tasks.index)
    assert match_difficulty(tasks, lengths, reference, seed=0, key="match") == kept


def test_a_run_no_task_falls_into_is_refused() -> None:
    tasks, lengths = _tasks([6, 6, 7, 8])
    with pytest.raises(
        ConfigError, match="match: no synthesized task takes the expert 10-11 turns, as 25% "
    ):
        match_difficulty(tasks, lengths, [6, 7, 8, 9, 10, 11, 12, 12], seed=0, key="match")


def test_matched_keydoor_boards_are_as_hard_as_the_training_boards(tmp_path: Path) -> None:
    episodes = 80
    train = get_env("keydoor-compact").tasks(episodes, seed=0, split="train")
    reference = [len(KeyBoard.from_task(t).shortest_path() or []) for t in train]
    bare = synthesize(
        "keydoor-compact", SynthesisSettings(episodes=episodes), run_id="bare",
        store=tmp_path / "s.db", out=tmp_path / "bare.jsonl",
    ).tasks  # fmt: skip
    kept, dropped = match_reference("keydoor-compact", bare, "train", episodes, 0, "match")
    assert dropped == {"beyond the reference's difficulty mix": len(bare) - len(kept)}
    assert all(t.data["synthesis"]["expert_turns"] == t.data["shortest"] for t in kept)
    matched, unmatched = [t.data["shortest"] for t in kept], [t.data["shortest"] for t in bare]
    assert _distance(matched, reference) < _distance(unmatched, reference) / 2
    assert sum(matched) / len(matched) > sum(unmatched) / len(unmatched) + 1.5


def test_synthesize_writes_only_the_matched_tasks(tmp_path: Path) -> None:
    settings = SynthesisSettings(episodes=8, match_difficulty="train")
    out = tmp_path / "a.jsonl"
    report = synthesize("gridworld", settings, run_id="e", store=tmp_path / "s.db", out=out)
    assert report.dropped["beyond the reference's difficulty mix"] > 0
    assert [t.id for t in TaskSet.from_jsonl(out)] == [t.id for t in report.tasks]
    assert all(t.data["synthesis"]["expert_turns"] >= 3 for t in report.tasks)
    with pytest.raises(ConfigError, match="match_difficulty: no synthesized task takes the expert"):
        synthesize(
            "keydoor-compact", settings, run_id="k", store=tmp_path / "s.db",
            out=tmp_path / "b.jsonl",
        )  # fmt: skip
    assert not (tmp_path / "b.jsonl").exists()
