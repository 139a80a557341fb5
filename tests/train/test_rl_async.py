"""The asynchronous RL mode: the next step's rollouts run on a thread, from weights of their
own, while this step trains."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import small_rl_config, token_id_rubric

from trajforge.train.rl import RLTrainer


@pytest.mark.parametrize("lora", [False, True])
def test_the_next_steps_rollouts_overlap_training(tmp_path: Path, lora: bool) -> None:
    extra: dict[str, Any] = {"lora": {"r": 4}} if lora else {}
    cfg = small_rl_config(tmp_path, steps=3, async_staleness=1, model={"spec": "tiny", **extra})
    trainer = RLTrainer(cfg, rubric=token_id_rubric())
    assert trainer.weights.policy.model is not trainer.parts.unwrapped_model()  # weights of its own
    threads: dict[int, str] = {}
    episodes = trainer._episodes

    def spy(step: int, *args: Any) -> Any:
        threads[step] = threading.current_thread().name
        return episodes(step, *args)

    trainer._episodes = spy  # type: ignore[method-assign]
    result = trainer.train()
    assert [h["step"] for h in result.history] == [1, 2, 3]
    # Every step's rollouts run on a watched thread; the next step's while one trains.
    assert threads == {
        1: "trajforge-rollout",
        2: "trajforge-rollout-ahead",
        3: "trajforge-rollout-ahead",
    }
    assert not trainer.rollouts.ahead
    # After the last update the rollout weights equal the trained ones.
    trained = trainer.weights.source().state_dict()
    served = trainer.weights.policy.model.state_dict()
    assert all(torch.equal(served[k], v) for k, v in trained.items())
