"""An RL run gives back what its rollout policy holds when it ends."""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path

from train_helpers import small_rl_config, token_id_rubric

from trajforge.train.rl import RLTrainer


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "trajforge-hf" and t.is_alive()]


def test_training_stops_the_rollout_worker_and_frees_the_policy(tmp_path: Path) -> None:
    before = _workers()
    trainer = RLTrainer(small_rl_config(tmp_path), rubric=token_id_rubric())
    trainer.train()
    assert _workers() == before
    policy = weakref.ref(trainer.weights.policy)
    del trainer
    gc.collect()
    # Nothing else (a worker thread above all) keeps the rollout policy and its weights alive.
    assert policy() is None
