"""The steps' rollouts ahead: queued while a step trains, each beginning when the step before
it has its episodes, never more steps ahead than the bound."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import cast

import pytest

from trajforge.rollout import RolloutHook, RolloutRun
from trajforge.schema import Task, Trajectory
from trajforge.train.rl.pipeline import RolloutStalled, StepRollouts

SAMPLE_S = 0.2


class Recorder:
    """A step's episodes, ending one every ``SAMPLE_S / 4`` for ``seconds[step]`` (default
    ``SAMPLE_S``), those of ``fail_step`` failing, with when each step's began and ended."""

    def __init__(self, fail_step: int | None = None, seconds: dict[int, float] | None = None):
        self.began: dict[int, float] = {}
        self.ended: dict[int, float] = {}
        self.fail_step = fail_step
        self.seconds = seconds or {}
        self.lock = threading.Lock()

    async def episodes(
        self, step: int, tasks: list[Task], round_: int, hooks: Sequence[RolloutHook]
    ) -> list[Trajectory]:
        with self.lock:
            self.began[step] = time.monotonic()
        end = time.monotonic() + self.seconds.get(step, SAMPLE_S)
        while time.monotonic() < end:
            await asyncio.sleep(SAMPLE_S / 4)
            for hook in hooks:
                hook.on_episode_end(cast(RolloutRun, None), cast(Trajectory, None))
        with self.lock:
            self.ended[step] = time.monotonic()
        if step == self.fail_step:
            raise RuntimeError(f"step {step}'s generator failed")
        return []


def _next_tasks() -> tuple[list[Task], int]:
    return [], 0


def test_each_step_ahead_begins_when_the_one_before_has_its_episodes() -> None:
    rec = Recorder()
    rollouts = StepRollouts(rec.episodes, ahead_steps=2, total_steps=4, stall_s=30.0)
    rollouts.take(1, _next_tasks)
    # Two steps queued ahead of the one taken, none beyond.
    assert [r.step for r in rollouts.ahead] == [2, 3]
    time.sleep(SAMPLE_S)  # a step's training
    rollouts.take(2, _next_tasks)
    assert [r.step for r in rollouts.ahead] == [3, 4]
    rollouts.take(3, _next_tasks)
    rollouts.take(4, _next_tasks)
    assert not rollouts.ahead
    # Sampled one after another, not all at once from the oldest weights.
    for step in (2, 3, 4):
        assert rec.began[step] >= rec.ended[step - 1]


def test_a_failed_step_reaches_the_trainer_and_the_next_still_begins() -> None:
    rec = Recorder(fail_step=2)
    rollouts = StepRollouts(rec.episodes, ahead_steps=1, total_steps=3, stall_s=30.0)
    rollouts.take(1, _next_tasks)
    with pytest.raises(RuntimeError, match="step 2's generator failed"):
        rollouts.take(2, _next_tasks)
    assert rollouts.cancel() == []


def test_a_stall_counts_from_when_a_step_ahead_began() -> None:
    # Step 2 waits behind step 1 for longer than the stall limit, then samples within it.
    rec = Recorder(seconds={1: 6 * SAMPLE_S, 2: 2 * SAMPLE_S})
    rollouts = StepRollouts(rec.episodes, ahead_steps=1, total_steps=2, stall_s=3 * SAMPLE_S)
    rollouts.take(1, _next_tasks)
    assert rollouts.take(2, _next_tasks) == ([], 0)
    assert rec.began[2] >= rec.ended[1]


def test_a_step_ahead_that_never_ends_is_a_stall_naming_it() -> None:
    async def stuck(
        step: int, tasks: list[Task], round_: int, hooks: Sequence[RolloutHook]
    ) -> list[Trajectory]:
        while step == 2:
            await asyncio.sleep(SAMPLE_S / 4)
        return []

    rollouts = StepRollouts(stuck, ahead_steps=1, total_steps=2, stall_s=SAMPLE_S)
    rollouts.take(1, _next_tasks)
    with pytest.raises(RolloutStalled, match="rl step 2"):
        rollouts.take(2, _next_tasks)
    assert rollouts.cancel() == []
