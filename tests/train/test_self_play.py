"""Self-play RL: every seat played and trained by one policy, or one seat against its own
earlier checkpoints; RAE's baselines kept per game and seat."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from train_helpers import small_rl_config

from trajforge.errors import ConfigError
from trajforge.schema import Trajectory
from trajforge.store.sqlite import TrajectoryStore
from trajforge.train.rl import RLTrainer


def stored(store: Path) -> list[Trajectory]:
    with TrajectoryStore(store) as st:
        return list(st.query())


def self_play_config(tmp_path: Path, **self_play: object) -> object:
    return small_rl_config(
        tmp_path,
        env="tictactoe",
        num_tasks=4,
        steps=2,
        store=tmp_path / "store.db",
        self_play=self_play,
    )


def test_one_policy_plays_and_trains_every_seat(tmp_path: Path) -> None:
    trainer = RLTrainer(self_play_config(tmp_path))  # type: ignore[arg-type]
    result = trainer.train()
    trajs = stored(tmp_path / "store.db")
    assert len(trajs) == 2 * 2 * 2 * 2  # steps x groups x samples x seats
    assert {t.model for t in trajs} == {trainer.weights.policy.name}  # type: ignore[union-attr]
    steps = {t.metadata["episode"] for t in trajs}
    assert len(steps) == len(trajs) // 2
    moved = [t for t in trajs if t.num_turns > 0]
    assert sum(m["trained_trajectories"] for m in result.history) == len(moved)
    assert trainer.self_play is not None
    roles = {f"tictactoe:{t.metadata['seat']}" for t in moved}
    assert set(trainer.self_play.baselines) == roles
    # The untrained model's replies are no moves: whoever moves first forfeits, so every
    # role that moved has a baseline below 0.
    assert all(b < 0 for b in trainer.self_play.baselines.values())
    assert trainer.cursor()["self_play"] == {"baselines": trainer.self_play.baselines}


def test_a_seat_against_a_pool_of_its_earlier_weights(tmp_path: Path) -> None:
    cfg = self_play_config(tmp_path, opponent="pool", snapshot_every=1, pool_size=2)
    trainer = RLTrainer(cfg)  # type: ignore[arg-type]
    trainer.train()
    assert trainer.self_play is not None
    name = trainer.weights.policy.name  # type: ignore[union-attr]
    assert [p.name for p in trainer.self_play.pool] == [f"{name}@step1", f"{name}@step2"]
    trajs = stored(tmp_path / "store.db")
    learner = [t for t in trajs if t.model == name]
    assert len(learner) == 2 * 2 * 2  # only the task's seat is the trained policy's
    assert all(t.metadata["seat"] == t.task.data["seat"] for t in learner)
    opponents = {t.model for t in trajs} - {name}
    assert opponents and all(m.startswith(f"{name}@step") for m in opponents)


def test_self_play_needs_a_game_played_here(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="env 'calculator' is no multi-seat game"):
        RLTrainer(small_rl_config(tmp_path, self_play={}))
    with pytest.raises(ValidationError, match="self_play: a game's seats are played by the"):
        small_rl_config(tmp_path, env="tictactoe", self_play={}, agent="python agent.py")
