"""Validation inside RL: the tasks it draws, the weights it keeps, and the run that ends on them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from train_helpers import small_rl_config, token_id_rubric

from trajforge.envs.registry import get_env
from trajforge.errors import ConfigError
from trajforge.judge import Evaluation
from trajforge.schema import Task
from trajforge.train import validation
from trajforge.train.config import ValidationMetric, ValidationSettings
from trajforge.train.rl import RLTrainer
from trajforge.train.validation import BestWeights, ValidationPoint, validation_tasks


def test_validation_tasks_are_training_tasks_the_rl_never_samples() -> None:
    entry = get_env("calculator")
    rl_tasks = entry.tasks(16, seed=0)
    # The same seed as the RL's draws the RL's tasks first: every one of them is skipped.
    chosen = validation_tasks(
        entry, ValidationSettings(tasks=8, seed=0), split="train", avoid=rl_tasks
    )
    assert [t.id for t in chosen] == [t.id for t in entry.tasks(24, seed=0)[16:]]
    other = validation_tasks(
        entry, ValidationSettings(tasks=8, seed=1), split="train", avoid=rl_tasks
    )
    assert len(other) == 8 and not {t.id for t in other} & {t.id for t in rl_tasks}
    test_ids = {t.id for t in entry.tasks(200, seed=0, split="test")}
    assert not {t.id for t in chosen + other} & test_ids


class _FixedTasks:
    name = "fixed"

    def __init__(self, tasks: list[Task]) -> None:
        self._tasks = tasks

    def tasks(self, n: int, seed: int = 0, split: str = "train") -> list[Task]:
        return self._tasks[:n]


def test_validation_tasks_refuse_a_task_set_the_rl_already_uses_up() -> None:
    tasks = get_env("calculator").tasks(5, seed=0)
    entry: Any = _FixedTasks(tasks)
    with pytest.raises(ConfigError, match=r"validation.tasks: env 'fixed' has only 2 train tasks"):
        validation_tasks(entry, ValidationSettings(tasks=4), split="train", avoid=tasks[:3])


def _point(step: int, reward: float) -> ValidationPoint:
    return ValidationPoint(step=step, reward_mean=reward, success=reward, scored=4, episodes=4)


def test_best_weights_keep_strict_improvements_of_trainable_parameters_only() -> None:
    layer = nn.Linear(3, 2)
    layer.bias.requires_grad_(False)
    best = BestWeights(layer)
    assert best.offer(_point(0, 0.5))
    with torch.no_grad():
        layer.weight.add_(1.0)
    assert not best.offer(_point(1, 0.5))  # a tie keeps the earlier weights
    with torch.no_grad():
        layer.weight.add_(1.0)
    assert best.offer(_point(2, 0.75))
    kept = layer.weight.detach().clone()
    with torch.no_grad():
        layer.weight.add_(1.0)
        layer.bias.add_(1.0)
    bias = layer.bias.detach().clone()
    best.restore()
    assert best.best == _point(2, 0.75)
    assert torch.equal(layer.weight, kept)
    assert torch.equal(layer.bias, bias)  # frozen: neither saved nor restored


def _scripted_rewards(
    monkeypatch: pytest.MonkeyPatch, by_step: dict[int, float]
) -> list[ValidationPoint]:
    """Make validation at step s report reward ``by_step[s]``; return the real points."""
    real: list[ValidationPoint] = []

    def scripted(step: int, evaluation: Evaluation) -> ValidationPoint:
        point = validation.validation_point(step, evaluation)
        real.append(point)
        return dataclasses.replace(point, reward_mean=by_step[step])

    monkeypatch.setattr("trajforge.train.rl.validating.validation_point", scripted)
    return real


def test_rl_ends_on_the_best_validated_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = _scripted_rewards(monkeypatch, {0: 0.5, 1: 0.9, 2: 0.1})
    cfg = small_rl_config(
        tmp_path, steps=2, optim={"lr": 1e-2}, validation={"tasks": 2, "every": 1}
    )
    seen: dict[int, dict[str, torch.Tensor]] = {}

    def remember(step: int, metrics: dict[str, float]) -> None:
        seen[step] = {n: p.detach().clone() for n, p in trainer.parts.model.named_parameters()}

    trainer = RLTrainer(cfg, rubric=token_id_rubric(), callbacks=[remember])
    assert len(trainer.validation.tasks) == 2
    assert not {t.id for t in trainer.validation.tasks} & {t.id for t in trainer.tasks}
    result = trainer.train()
    assert [p["step"] for p in result.validation] == [0, 1, 2]
    assert [p["reward_mean"] for p in result.validation] == [0.5, 0.9, 0.1]
    assert result.kept_step == 1
    # Greedy episodes, one per task, scored by the run's rubric.
    assert all(p.episodes == 2 for p in real)
    assert [h["val_reward"] for h in result.history] == [0.9, 0.1]
    moved = [n for n, p in seen[2].items() if not torch.equal(p, seen[1][n])]
    assert moved  # step 2 changed the weights...
    for name, p in trainer.parts.model.named_parameters():
        assert torch.equal(p, seen[1][name]), name  # ...and the run ended on step 1's


def test_rl_keeps_the_starting_weights_when_no_step_beats_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scripted_rewards(monkeypatch, {0: 0.5, 2: 0.5})
    cfg = small_rl_config(tmp_path, steps=2, optim={"lr": 1e-2}, validation={"tasks": 2})
    trainer = RLTrainer(cfg, rubric=token_id_rubric())
    start = {n: p.detach().clone() for n, p in trainer.parts.model.named_parameters()}
    result = trainer.train()
    assert [p["step"] for p in result.validation] == [0, 2]  # every: 0, the ends only
    assert result.kept_step == 0
    assert "val_reward" not in result.history[0] and result.history[1]["val_reward"] == 0.5
    for name, p in trainer.parts.model.named_parameters():
        assert torch.equal(p, start[name]), name


def test_rl_without_keep_best_ends_on_the_last_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scripted_rewards(monkeypatch, {0: 0.9, 1: 0.1})
    cfg = small_rl_config(tmp_path, optim={"lr": 1e-2}, validation={"tasks": 2, "keep_best": False})
    trainer = RLTrainer(cfg, rubric=token_id_rubric())
    start = {n: p.detach().clone() for n, p in trainer.parts.model.named_parameters()}
    result = trainer.train()
    assert result.kept_step is None and len(result.validation) == 2
    assert any(not torch.equal(p, start[n]) for n, p in trainer.parts.model.named_parameters())


def test_a_resumed_rl_run_reuses_the_validation_of_its_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = _scripted_rewards(monkeypatch, {0: 0.5, 1: 0.9})
    settings: dict[str, Any] = {"optim": {"lr": 1e-2}, "checkpoint_every": 1}
    cfg = small_rl_config(tmp_path, validation={"tasks": 2, "every": 1}, **settings)
    RLTrainer(cfg, rubric=token_id_rubric()).train()
    assert [p.step for p in real] == [0, 1]
    resumed = RLTrainer(cfg, rubric=token_id_rubric()).train(resume=True)
    assert [p.step for p in real] == [0, 1]  # the checkpoint's step-1 validation is not re-run
    assert [p["step"] for p in resumed.validation] == [0, 1]
    assert resumed.kept_step == 1


def test_best_weights_by_success_rank_success_first_and_reward_on_ties() -> None:
    layer = nn.Linear(3, 2)
    by_reward = BestWeights(layer)
    by_success = BestWeights(layer, ValidationMetric.SUCCESS)
    start = ValidationPoint(0, reward_mean=0.2, success=0.42, scored=12, episodes=12)
    # More solved, but more wrong final actions (-1) where the start ran out of turns (0).
    bolder = ValidationPoint(2, reward_mean=0.1, success=0.5, scored=12, episodes=12)
    for best in (by_reward, by_success):
        assert best.offer(start)
    assert not by_reward.offer(bolder)
    assert by_success.offer(bolder)
    assert not by_success.offer(dataclasses.replace(bolder, step=3))  # a tie keeps the earlier
    assert by_success.offer(dataclasses.replace(bolder, step=4, reward_mean=0.3))
    assert by_success.best is not None and by_success.best.step == 4
