"""An RL step trains an episode whose last observation, the env's answer to its final turn,
takes it past ``max_seq_len``: the rollout bounds the turns it samples, and nothing trained
reads what comes after them (the web job's first 204-episode run stopped on one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from train_helpers import small_rl_config

from trajforge.schema import Message, Role, Trajectory
from trajforge.train.rl import RLTrainer


def test_a_last_observation_past_the_context_limit_does_not_stop_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = small_rl_config(tmp_path, max_seq_len=1024)
    trainer = RLTrainer(cfg)
    episodes = trainer._episodes
    sampled: list[int] = []

    async def long_last_observation(step: int, tasks: list[object], *rest: Any) -> list[Trajectory]:
        trajs = await episodes(step, tasks, *rest)
        for t in trajs:
            sampled.append(sum(len(m.token_ids or ()) for m in t.messages))
            t.messages.append(Message(role=Role.USER, content="page", token_ids=[7] * 1024))
        return trajs

    monkeypatch.setattr(trainer, "_episodes", long_last_observation)
    (metrics,) = trainer.train().history
    assert max(sampled) <= 1024
    assert metrics["trained_trajectories"] == 4
