"""An RL run never hangs: a stalled generator, a dead rollout worker or an error in training
ends the run with the reason within ``rollout_stall_s`` (and the cancel grace), and leaves no
rollout running."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from train_helpers import small_rl_config, token_id_rubric

from trajforge.rollout import RolloutError, RolloutHook, RolloutSpec
from trajforge.schema import Trajectory
from trajforge.train.rl import RLTrainer
from trajforge.train.rl import update as rl_update
from trajforge.train.rl.pipeline import RolloutStalled
from trajforge.train.rl.runners import StepRunner


def _ours() -> set[threading.Thread]:
    """The rollout threads and rollout policy workers alive."""
    return {
        t
        for t in threading.enumerate()
        if t.is_alive() and t.name.startswith(("trajforge-rollout", "trajforge-hf"))
    }


def _left(before: set[threading.Thread]) -> list[str]:
    """What the run started and left running (threads of earlier tests may end meanwhile)."""
    return sorted(t.name for t in _ours() - before)


class Scripted(StepRunner):
    """The live runner's episodes, except at ``step``: there it hangs forever (``hang``) or
    fails as a run whose every worker died (``die``). Records which steps were cancelled."""

    def __init__(self, live: StepRunner, step: int, fault: str) -> None:
        self.live, self.step, self.fault = live, step, fault
        self.cancelled: list[int] = []
        self.hanging = threading.Event()

    async def rollout(
        self, spec: RolloutSpec, step: int, hooks: Sequence[RolloutHook] = ()
    ) -> list[Trajectory]:
        if step != self.step:
            return await self.live.rollout(spec, step, hooks)
        if self.fault == "die":
            raise RolloutError("every Ray rollout actor died (0 replaced, 4 episodes left)")
        self.hanging.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(step)
            raise
        raise AssertionError("unreachable")


def _trainer(tmp_path: Path, step: int, fault: str, **overrides: Any) -> tuple[RLTrainer, Scripted]:
    cfg = small_rl_config(tmp_path, steps=3, rollout_stall_s=1.0, **overrides)
    trainer = RLTrainer(cfg, rubric=token_id_rubric())
    assert trainer.runner is not None
    scripted = Scripted(trainer.runner, step, fault)
    trainer.runner = scripted
    return trainer, scripted


@pytest.mark.parametrize("staleness", [0, 1])
def test_a_stalled_generator_ends_the_run_with_the_reason(tmp_path: Path, staleness: int) -> None:
    before = _ours()
    trainer, scripted = _trainer(tmp_path, 2, "hang", async_staleness=staleness)
    start = time.monotonic()
    with pytest.raises(RolloutStalled, match=r"rl step 2: no episode .* ended in 1 s"):
        trainer.train()
    assert time.monotonic() - start < 60  # one stall limit, not forever
    assert scripted.cancelled == [2]
    assert _left(before) == []


def test_a_dead_worker_ends_the_run_with_the_reason(tmp_path: Path) -> None:
    before = _ours()
    trainer, _ = _trainer(tmp_path, 2, "die", async_staleness=1)
    with pytest.raises(RolloutError, match="every Ray rollout actor died"):
        trainer.train()
    assert _left(before) == []


def test_an_error_in_training_cancels_the_rollouts_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step 1's update fails while step 2's rollouts (hanging) are under way."""
    before = _ours()
    trainer, scripted = _trainer(tmp_path, 2, "hang", async_staleness=1)

    def broken(*args: Any, **kwargs: Any) -> dict[str, float]:
        # Step 2's rollouts begin once step 1 has its episodes, on their own thread: the update
        # fails only once they are under way, else there would be nothing ahead to cancel.
        assert scripted.hanging.wait(30)
        raise RuntimeError("optimizer state corrupted")

    monkeypatch.setattr(rl_update, "update", broken)
    with pytest.raises(RuntimeError, match="optimizer state corrupted"):
        trainer.train()
    assert scripted.cancelled == [2]
    assert _left(before) == []
