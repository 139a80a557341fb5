"""Self-play RL whose games are played on a local Ray cluster (started once for the module):
the actors play whole games, every seat, and hand the trainer the per-seat trajectories the
in-process path makes; the pool's earlier weights reach the actors; the refusal left is one
line."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from trajforge.distributed import POLICY_VERSION, RayOptions
from trajforge.distributed.runner import RayRunner
from trajforge.envs.registry import get_env
from trajforge.errors import ConfigError
from trajforge.policy.check import check_trajectories
from trajforge.policy.hf import HFPolicy
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.naming import load_policy
from trajforge.rollout import PolicyRef, RolloutSpec, Sampling
from trajforge.schema import Trajectory
from trajforge.store.sqlite import TrajectoryStore
from trajforge.train.config import RLConfig, SelfPlaySettings, parse_config
from trajforge.train.rl import RLTrainer
from trajforge.train.rl.self_play import SelfPlay

pytestmark = pytest.mark.usefixtures("cluster")

GAME = "kuhn-poker"
SEATS = {"p1", "p2"}


def _config(out: Path, **self_play: Any) -> RLConfig:
    return RLConfig.model_validate(
        {
            "output_dir": out,
            "env": GAME,
            "num_tasks": 2,
            "groups_per_step": 2,
            "samples_per_group": 2,
            "steps": 2,
            "max_new_tokens": 8,
            "model": {"spec": "tiny", "precision": "fp32"},
            "store": out / "rollouts.db",
            "ray": {"actors": 2, "slots": 4},
            "self_play": self_play,
            "tensorboard": False,
            "progress": False,
        }
    )


def _stored(store: Path) -> list[Trajectory]:
    with TrajectoryStore(store) as st:
        return list(st.query())


def _assert_games(trajs: list[Trajectory], seats: set[str]) -> None:
    """One trajectory per seat per game, linked to each other under one episode, each
    token-exact, with the role groups RAE and the estimators read."""
    games: dict[str, list[Trajectory]] = {}
    for t in trajs:
        games.setdefault(t.metadata["episode"], []).append(t)
    for game in games.values():
        assert {t.metadata["seat"] for t in game} == seats
        assert len(game) == len(seats)
        ids = {t.id for t in game}
        for t in game:
            assert set(t.metadata["linked"]) == ids - {t.id}
            assert t.group_id is not None and t.group_id.endswith(f":{t.metadata['seat']}")
            assert set(t.metadata["seats"]) == seats
    tokenizer = load_tokenizer()
    report = check_trajectories(trajs, lambda t: tokenizer)
    assert report.ok and report.checked == len(trajs), report


def test_self_play_steps_play_every_seat_on_the_actors(tmp_path: Path) -> None:
    out = tmp_path / "self"
    trainer = RLTrainer(_config(out))
    result = trainer.train()
    assert [h["step"] for h in result.history] == [1, 2]
    trajs = _stored(out / "rollouts.db")
    # steps x groups x samples x seats, every one of them played on an actor
    assert len(trajs) == 2 * 2 * 2 * 2
    assert Counter(t.metadata.get(POLICY_VERSION) for t in trajs) == {0: 8, 1: 8}
    _assert_games(trajs, SEATS)
    moved = [t for t in trajs if t.num_turns > 0]
    assert moved
    assert sum(h["trained_trajectories"] for h in result.history) == len(moved)
    assert trainer.self_play is not None
    assert set(trainer.self_play.baselines) == {f"{GAME}:{t.metadata['seat']}" for t in moved}
    assert not trainer.remote.actors  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_seat_against_the_pool_on_the_actors(tmp_path: Path) -> None:
    out = tmp_path / "pool"
    trainer = RLTrainer(_config(out, opponent="pool", snapshot_every=1, pool_size=2))
    trainer.train()
    assert trainer.self_play is not None
    # The first step drew the starting weights; each update's published weights joined after.
    assert [s.name for s in trainer.self_play.remote_pool] == ["step1", "step2"]
    assert not trainer.self_play.pool  # nothing copied on the driver
    trajs = _stored(out / "rollouts.db")
    _assert_games(trajs, SEATS)
    learners = [t for t in trajs if "@" not in (t.model or "")]
    assert len(learners) == 2 * 2 * 2  # only the task's seat is the trained policy's
    assert all(t.metadata["seat"] == t.task.data["seat"] for t in learners)
    opponents = {t.model for t in trajs} - {t.model for t in learners}
    (name,) = {t.model for t in learners}
    # Step 2 drew the pool {step0, step1}: at least one snapshot, and no other weights.
    assert opponents and opponents <= {f"{name}@step0", f"{name}@step1"}, opponents


def _key(t: Trajectory) -> tuple[str, int, str]:
    return (t.task.id, t.sample_index or 0, t.metadata["seat"])


def _tokens(trajs: list[Trajectory]) -> list[tuple[str, int, str, list[int]]]:
    """Every trajectory's ids, prompts and sampled turns alike, by task, sample and seat."""
    return sorted((*_key(t), [i for m in t.messages for i in m.token_ids or ()]) for t in trajs)


def test_the_actors_play_the_games_this_process_plays(tmp_path: Path) -> None:
    """Same seed, same weights (``tiny`` is built from a fixed seed), seeded sampling: every
    seat's tokens equal the in-process games'. The per-move seeds drive each sequence's own
    uniform stream, so the batching (which differs between the two) does not change them."""
    entry = get_env(GAME)
    tasks = entry.tasks(3, seed=0, split="train")
    spec = RolloutSpec(
        env=GAME,
        tasks=tasks,
        n=2,
        sampling=Sampling(temperature=1.0, max_new_tokens=8),
        seed=7,
        run_id="sp",
    )
    local = SelfPlay(SelfPlaySettings(), entry, seed=0)
    policy = load_policy("tiny", max_batch_size=8)
    assert isinstance(policy, HFPolicy)
    here = local.rollout(spec, policy, step=1)
    asyncio.run(policy.close())

    on_ray = SelfPlay(SelfPlaySettings(), entry, seed=0)
    runner = RayRunner(RayOptions(actors=1, slots=4), persistent=True)
    on_ray.remote = runner
    try:
        ref = spec.model_copy(update={"policy": PolicyRef(name="tiny", batch_size=8)})
        there = on_ray.rollout(ref, policy, step=1)
    finally:
        runner.shutdown()
    assert len(there) == len(here) == 3 * 2 * 2
    _assert_games(there, set(entry.game().seats))  # type: ignore[misc]
    assert [(t.group_id, t.run_id) for t in sorted(there, key=_key)] == [
        (t.group_id, t.run_id) for t in sorted(here, key=_key)
    ]
    assert _tokens(there) == _tokens(here)
    assert sum(len(t[3]) for t in _tokens(here)) > 0


def test_only_an_agent_program_is_refused_with_self_play() -> None:
    cfg = parse_config({"env": GAME, "self_play": {"opponent": "pool"}, "ray": {}}, RLConfig)
    assert cfg.self_play is not None and cfg.ray is not None
    with pytest.raises(ConfigError) as refused:
        parse_config({"env": GAME, "self_play": {}, "agent": "python agent.py"}, RLConfig)
    line = next(
        line for line in str(refused.value).splitlines() if "self_play" in line and "agent" in line
    )
    assert "a game's seats are played by the trainer, not by agent" in line
