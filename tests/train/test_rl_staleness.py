"""The staleness bound (``max_staleness``) and partial rollouts: every sampled turn records the
weights version that sampled it, an episode under way when new weights load samples its later
turns from them, tokens older than the bound leave the loss, and a stale sample is dropped or
rolled out again; long episodes are trained as often as short ones."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from train_helpers import qa_trajectory, small_rl_config, token_id_rubric

from trajforge.envs.base import Env, StepResult
from trajforge.policy.hf import HFPolicy
from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.rollout import (
    WEIGHTS_VERSIONS,
    Limits,
    RolloutHook,
    RolloutSpec,
    Sampling,
    run_rollout,
)
from trajforge.schema import Message, Role, Task, Trajectory
from trajforge.train.batch import encode_trajectory
from trajforge.train.rl import RLTrainer
from trajforge.train.rl.runners import StepRunner
from trajforge.train.rl.staleness import is_stale, token_staleness, turn_staleness


class TwoTurns(Env):
    """Two turns; between them, new weights (version 7) load into ``policy``."""

    name = "two-turns"

    def __init__(self, policy: HFPolicy) -> None:
        super().__init__()
        self.policy = policy
        self.turn = 0

    async def reset(self, task: Task) -> list[Message]:
        return [Message(role=Role.USER, content=task.prompt)]

    async def step(self, action: Message) -> StepResult:
        self.turn += 1
        if self.turn == 1:  # published while the episode is in flight
            await asyncio.to_thread(self.policy.set_weights, self.policy.model, version=7)
        done = self.turn == 2
        return StepResult(observations=[Message(role=Role.USER, content="go on")], done=done)

    async def close(self) -> None:
        return None


def test_an_episode_in_flight_samples_its_later_turns_from_new_weights() -> None:
    model, tok = tiny_model_and_tokenizer()
    policy = HFPolicy(model, tok)
    policy.weights_version = 3
    spec = RolloutSpec(
        tasks=[Task(id="t", prompt="count")],
        limits=Limits(max_turns=2, stop_on_turn_limit=False),
        sampling=Sampling(max_new_tokens=4),
    )
    try:
        [traj] = run_rollout(spec, env=lambda: TwoTurns(policy), policy=policy)
    finally:
        asyncio.run(policy.close())
    assert traj.metadata[WEIGHTS_VERSIONS] == [3, 7]
    # Trained as version 7: the first turn lags 4 updates, the second none, token by token.
    assert turn_staleness(traj, 7) == [4, 0]
    seq = encode_trajectory(traj)
    lags = token_staleness(traj, seq.turn_index, 7)
    first = [lag for lag, t in zip(lags, seq.turn_index, strict=True) if t == 0]
    second = [lag for lag, t in zip(lags, seq.turn_index, strict=True) if t == 1]
    assert first and set(first) == {4} and second and set(second) == {0}
    assert not is_stale(traj, 7, bound=1) and is_stale(traj, 9, bound=1)


def test_a_recorded_turn_without_a_version_counts_the_episode_s() -> None:
    tok = tiny_model_and_tokenizer()[1]
    traj = qa_trajectory(tok, "2+2?", "4", tool_result="4")
    traj.metadata.update({WEIGHTS_VERSIONS: [None, 5], "policy_version": 2})
    assert turn_staleness(traj, 6) == [4, 1]
    traj.metadata.pop(WEIGHTS_VERSIONS)
    assert turn_staleness(traj, 6) == [4, 4]


def _versioned(traj: Trajectory, versions: list[int]) -> Trajectory:
    traj.metadata[WEIGHTS_VERSIONS] = versions
    return traj


class MixedLengths(StepRunner):
    """Hand-built episodes for the step's tasks: a ``long-`` task's episodes take two turns,
    the others one. ``versions(task_id, trained, resample)`` gives each turn's version."""

    def __init__(self, tok: Any, versions: Any) -> None:
        self.tok = tok
        self.versions = versions
        self.runs: list[str] = []

    async def rollout(
        self, spec: RolloutSpec, step: int, hooks: Sequence[RolloutHook] = ()
    ) -> list[Trajectory]:
        assert spec.run_id is not None
        self.runs.append(spec.run_id)
        resample = spec.run_id.endswith("-resample")
        out = []
        for task in spec.tasks:
            long = task.id.startswith("long-")
            for sample in range(spec.n):
                traj = qa_trajectory(
                    self.tok,
                    task.prompt,
                    f"answer {sample} of {task.id}",
                    tool_result="3" if long else None,
                    task_id=task.id,
                    group_id=f"{spec.run_id}:{task.id}",
                    sample_index=sample,
                    reward=float(sample),
                )
                out.append(_versioned(traj, self.versions(task.id, step - 1, resample)))
        return out


def _trainer(tmp_path: Path, runner: MixedLengths, **overrides: Any) -> RLTrainer:
    cfg = small_rl_config(tmp_path, steps=2, groups_per_step=4, num_tasks=4, **overrides)
    trainer = RLTrainer(cfg, rubric=token_id_rubric())
    ids = ["long-a", "short-b", "long-c", "short-d"]
    trainer.tasks = [
        t.model_copy(update={"id": i}) for t, i in zip(trainer.tasks, ids, strict=True)
    ]
    trainer.task_index = {t.id: i for i, t in enumerate(trainer.tasks)}
    trainer.runner = runner
    return trainer


def test_stale_tokens_leave_the_loss_and_stale_samples_their_group(tmp_path: Path) -> None:
    """Bound 1: a long episode's first turn (3 updates old) leaves the loss while its second
    (fresh) trains; short ``-b`` episodes one update old train; short ``-d`` ones 3 updates
    old are stale samples, dropped with their group."""

    def versions(task_id: str, trained: int, resample: bool) -> list[int]:
        if task_id.startswith("long-"):
            return [trained - 3, trained]
        return [trained - 1] if task_id == "short-b" else [trained - 3]

    tok = tiny_model_and_tokenizer()[1]
    trainer = _trainer(tmp_path, MixedLengths(tok, versions), max_staleness=1)
    for h in trainer.train().history:
        assert h["stale_samples"] == 2.0
        assert h["stale_samples_skipped_groups"] == 1.0
        assert h["trained_trajectories"] == 6.0  # both long groups, the fresh short one
        assert 0.0 < h["stale_token_frac"] < 1.0
        assert h["policy_staleness_max"] == 3.0


def test_resampled_long_episodes_are_trained_every_step(tmp_path: Path) -> None:
    """Long episodes started too long ago are rolled out again from the weights just trained
    (never stale twice), so each step trains as many long episodes as short ones."""

    def versions(task_id: str, trained: int, resample: bool) -> list[int]:
        if task_id.startswith("long-") and not resample:
            return [trained - 2, trained - 2]
        return [trained] * (2 if task_id.startswith("long-") else 1)

    tok = tiny_model_and_tokenizer()[1]
    runner = MixedLengths(tok, versions)
    trainer = _trainer(tmp_path, runner, max_staleness=1, stale_samples="resample")
    for h in trainer.train().history:
        assert h["stale_resampled_groups"] == 2.0
        assert h["stale_samples"] == 0.0
        assert h["trained_trajectories"] == 8.0
        assert h["stale_token_frac"] == 0.0
    assert [r.rsplit("-", 1)[-1] for r in runner.runs] == ["step1", "resample", "step2", "resample"]


def test_a_path_without_versions_refuses_a_bound(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="max_staleness: an agent program's or a game's"):
        small_rl_config(tmp_path, env="tictactoe", self_play={}, max_staleness=1)
