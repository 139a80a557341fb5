"""RL whose rollouts run on a local 2-actor Ray cluster: the actors load the trained weights
after every update (their logprobs equal the trainer's), each trajectory records the weights
version it was sampled with, and a run resumed from its checkpoint goes on from its weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from trajforge.distributed import POLICY_VERSION
from trajforge.errors import ConfigError
from trajforge.judge.scorer import FunctionScorer, Rubric
from trajforge.rollout import WEIGHTS_VERSIONS
from trajforge.schema import EvaluatorKind, Role, Trajectory
from trajforge.store.sqlite import TrajectoryStore
from trajforge.train.config import RLConfig, parse_config
from trajforge.train.rl import RLTrainer

pytestmark = pytest.mark.usefixtures("cluster")


def _config(out: Path, steps: int, **overrides: Any) -> RLConfig:
    return RLConfig.model_validate(
        overrides
        | {
            "output_dir": out,
            "env": "calculator",
            "num_tasks": 4,
            "groups_per_step": 2,
            "samples_per_group": 2,
            "steps": steps,
            "max_new_tokens": 8,
            "max_turns": 1,
            "recompute_old_logprobs": False,
            "optim": {"lr": 3e-2},
            "model": {"spec": "tiny", "precision": "fp32"},
            "checkpoint_every": 1,
            "store": out / "rollouts.db",
            "ray": {"actors": 2, "slots": 2},
            "tensorboard": False,
            "progress": False,
        }
    )


def _token_ids(traj: Trajectory) -> float:
    # A reward that (almost) never ties between samples of a group, so the updates move the
    # weights.
    ids = [i for m in traj.messages if m.role is Role.ASSISTANT for i in m.token_ids or ()]
    return sum(i % 1000 for i in ids) / (1000 * max(1, len(ids)))


def _trainer(out: Path, steps: int, **overrides: Any) -> RLTrainer:
    rubric = Rubric([(FunctionScorer(_token_ids, "token_id", EvaluatorKind.RULE), 1.0)])
    return RLTrainer(_config(out, steps, **overrides), rubric=rubric)


def _versions(out: Path, step: int) -> list[Any]:
    with TrajectoryStore(out / "rollouts.db") as store:
        trajs = store.query(run=f"rl-{out.name}-step{step}")
    return [t.metadata.get(POLICY_VERSION) for t in trajs]


def _turn_versions(out: Path, step: int) -> list[int]:
    with TrajectoryStore(out / "rollouts.db") as store:
        trajs = store.query(run=f"rl-{out.name}-step{step}")
    return [v for t in trajs for v in t.metadata[WEIGHTS_VERSIONS]]


def test_ray_actors_sample_each_step_from_the_weights_just_trained(tmp_path: Path) -> None:
    out = tmp_path / "run"
    trainer = _trainer(out, steps=2)
    before = {k: v.clone() for k, v in trainer.parts.unwrapped_model().state_dict().items()}
    result = trainer.train()
    after = trainer.parts.unwrapped_model().state_dict()
    assert max(float((after[k] - v).abs().max()) for k, v in before.items()) > 1e-3
    assert _versions(out, 1) == [0] * 4
    assert _versions(out, 2) == [1] * 4
    # Every turn records the trainer's version of the weights that sampled it.
    assert _turn_versions(out, 2) == [1] * 4
    for h in result.history:
        assert h["policy_staleness_max"] == 0.0
        # The actors' recorded logprobs against the trainer's forward on the same tokens:
        # step 2's are equal only if the actors sampled from the updated weights.
        assert h["rollout_logprob_gap"] < 1e-4
    assert not trainer.remote.actors  # type: ignore[union-attr]


@pytest.mark.slow
def test_under_lora_the_actors_sample_from_the_merged_weights(tmp_path: Path) -> None:
    out = tmp_path / "lora"
    model = {"spec": "tiny", "precision": "fp32", "lora": {"r": 4}}
    result = _trainer(out, steps=2, model=model).train()
    assert _versions(out, 2) == [1] * 4
    assert result.history[1]["rollout_logprob_gap"] < 1e-4


@pytest.mark.slow
def test_a_ray_run_resumes_from_its_checkpoint_with_its_weights(tmp_path: Path) -> None:
    out = tmp_path / "resumed"
    _trainer(out, steps=1).train()
    resumed = _trainer(out, steps=2)
    result = resumed.train(resume=True)
    assert result.resumed_from == 1
    assert [h["step"] for h in result.history] == [2]
    assert _versions(out, 2) == [1] * 4
    assert result.history[0]["rollout_logprob_gap"] < 1e-4


@pytest.mark.slow
def test_stale_weights_show_in_the_logprob_gap(tmp_path: Path) -> None:
    """The check above can fail: actors left on the first weights sample step 2 off-policy."""
    out = tmp_path / "stale"
    # Their tokens are one update old: within the bound, so they train and show the gap.
    trainer = _trainer(out, steps=2, max_staleness=1)
    publish = trainer.weights.publish
    trainer.weights.publish = lambda remote, version: (  # type: ignore[method-assign]
        publish(remote, version) if version == 0 else None
    )
    result = trainer.train()
    assert _versions(out, 2) == [0] * 4
    assert result.history[1]["policy_staleness_max"] == 1.0
    assert result.history[1]["rollout_logprob_gap"] > 1e-3
    assert torch.is_grad_enabled()


@pytest.mark.slow
def test_rollouts_two_steps_ahead_lag_at_most_two_updates(tmp_path: Path) -> None:
    out = tmp_path / "ahead"
    trainer = _trainer(out, steps=4, async_staleness=2)
    result = trainer.train()
    assert [h["step"] for h in result.history] == [1, 2, 3, 4]
    assert result.history[0]["policy_staleness_max"] == 0.0
    for step, h in enumerate(result.history, start=1):
        versions = _versions(out, step)
        assert len(versions) == 4
        # Sampled from weights no older than k = 2 updates, none newer than the step's own.
        assert all(max(0, step - 3) <= v <= step - 1 for v in versions), versions
        # The oldest turn's weights: a turn sampled after a newer publish records the newer.
        turns = _turn_versions(out, step)
        assert all(min(versions) <= v <= step - 1 for v in turns), turns
        assert h["policy_staleness_max"] == step - 1 - min(turns)
    assert not trainer.rollouts.ahead


def test_ray_rollouts_are_for_env_episodes_only() -> None:
    with pytest.raises(ConfigError, match="ray: an agent program"):
        parse_config({"agent": "python agent.py", "ray": {}}, RLConfig)
    with pytest.raises(ConfigError, match="async_staleness: more than 1 step ahead needs ray"):
        parse_config({"async_staleness": 2}, RLConfig)
