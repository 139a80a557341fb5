"""Prioritized task revisits: which tasks come back, in which order, and when they leave."""

from __future__ import annotations

from pathlib import Path

from test_dpo_rl import small_rl_config

from trajforge.store.sqlite import TrajectoryStore
from trajforge.train.config import TaskRevisitSettings
from trajforge.train.rl import RLTrainer
from trajforge.train.rl.task_revisit import TaskRevisits


def _revisits(**settings: object) -> TaskRevisits:
    return TaskRevisits(TaskRevisitSettings.model_validate({"enabled": True, **settings}))


def test_unsolved_tasks_come_back_widest_spread_first() -> None:
    pool = _revisits(fraction=0.5)
    pool.update({0: [1, 1, 1, 1], 1: [0, 1, 0, 1], 2: [0, 0, 0, 0], 3: [1, 1, 1, 0]})
    assert sorted(pool.entries) == [1, 2, 3]  # task 0 was solved by every sample
    assert pool.pick(4) == [1, 3]  # half of 4 groups; spread 0.5, then 0.43; never-solved last
    assert pool.pick(8) == [1, 3, 2]  # spread first, whatever the revisits
    pool.update({1: [1, 1, 1, 1]})
    assert sorted(pool.entries) == [2, 3]


def test_tasks_leave_after_max_visits_and_beyond_capacity() -> None:
    pool = _revisits(fraction=1.0, max_visits=2, capacity=2)
    pool.update({5: [0, 1], 6: [0, 0], 7: [1, 0]})
    assert sorted(pool.entries) == [5, 7]  # the never-solved task is dropped first
    assert pool.pick(1) == [5]
    pool.update({5: [0, 1]})
    assert pool.pick(1) == [7]  # equal spread: the less revisited task first
    pool.update({7: [0, 1]})
    assert pool.pick(1) == [5]
    pool.update({5: [0, 1]})  # its second revisit: it leaves
    assert sorted(pool.entries) == [7]


def test_state_round_trips_and_disabled_does_nothing() -> None:
    pool = _revisits()
    pool.update({3: [0, 1], 4: [0, 0]})
    pool.pick(2)
    restored = _revisits()
    restored.load_state(pool.state())
    assert restored.entries == pool.entries
    off = TaskRevisits(TaskRevisitSettings())
    off.update({1: [0, 0]})
    assert off.pick(4) == [] and not off.entries


def test_rl_steps_revisit_unsolved_tasks(tmp_path: Path) -> None:
    store = tmp_path / "rl.db"
    cfg = small_rl_config(
        tmp_path / "run",
        num_tasks=6,
        steps=3,
        max_new_tokens=4,
        store=store,
        revisit={"enabled": True, "fraction": 0.5, "max_visits": 1},
    )
    trainer = RLTrainer(cfg)
    result = trainer.train()
    assert [h["revisited_groups"] for h in result.history] == [0.0, 1.0, 1.0]
    db = TrajectoryStore(store)
    try:
        steps = [{t.task.id for t in db.query(run=f"rl-run-step{step}")} for step in (1, 2, 3)]
    finally:
        db.close()
    ids = [task.id for task in trainer.tasks]
    # The random tiny model solves nothing: step 2 revisits task 0 (its one visit), then takes
    # the next fresh task; step 3 revisits task 1, the unvisited one with the lowest index.
    assert steps == [{ids[0], ids[1]}, {ids[0], ids[2]}, {ids[1], ids[3]}]
    assert sorted(trainer.cursor()["revisit"], key=lambda e: e["task_index"]) == [
        {"task_index": 2, "spread": 0.0, "visits": 0},
        {"task_index": 3, "spread": 0.0, "visits": 0},
    ]
