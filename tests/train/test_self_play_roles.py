"""Per-role adapters in self-play: each seat of a game trains its own LoRA adapter on the one
base model, samples with it, and a checkpoint keeps them all."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from train_helpers import small_rl_config

from trajforge.errors import ConfigError
from trajforge.policy import SamplingParams
from trajforge.schema import Role, Trajectory
from trajforge.train.checkpoint import latest_checkpoint, load_checkpoint
from trajforge.train.config import RLConfig
from trajforge.train.rl import RLTrainer
from trajforge.train.rl import update as rl_update
from trajforge.train.rl.roles import BASE, RoleAdapters

LORA = {"r": 4, "alpha": 8}


def roles_config(tmp_path: Path, **overrides: object) -> RLConfig:
    settings: dict[str, object] = {
        "env": "kuhn-poker",
        "num_tasks": 4,
        "max_new_tokens": 4,
        "temperature": 1.0,
        "model": {"spec": "tiny", "precision": "fp32", "lora": LORA},
        "optim": {"lr": 0.05},
        "self_play": {"per_role": True},
    }
    return small_rl_config(tmp_path, **{**settings, **overrides})


def snapshot(roles: RoleAdapters) -> dict[str, list[torch.Tensor]]:
    adapters = {name: [p.detach().clone() for p in ps] for name, ps in roles.params.items()}
    base = [p.detach().clone() for n, p in roles.model.named_parameters() if f".{BASE}." in n]
    return {**adapters, BASE: base}


def step_games(trainer: RLTrainer, step: int) -> list[Trajectory]:
    """Step ``step``'s games, every seat's trajectory, scored."""
    trajs: list[Trajectory] = trainer._scored(step)[0]
    return trajs


Turn = tuple[list[int], list[float] | None]
"""A sampled turn's ids and logprobs."""


def gap(roles: RoleAdapters, adapter: str, prompt: list[int], turn: Turn) -> float:
    """The largest gap between ``turn``'s logprobs and the trained (PEFT) model's own under
    ``adapter``."""
    token_ids, logprobs = turn
    ids = torch.tensor([prompt + token_ids])
    roles.activate(adapter)
    try:
        with torch.no_grad():
            logits = roles.model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    finally:
        roles.activate(BASE)
    lp = torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt) :, None])[:, 0]
    assert logprobs is not None
    return float((lp - torch.tensor(logprobs)).abs().max())


def first_turn(traj: Trajectory) -> tuple[list[int], Turn]:
    """The ids before ``traj``'s first sampled turn, and that turn."""
    prompt: list[int] = []
    for m in traj.messages:
        assert m.token_ids is not None
        if m.role is Role.ASSISTANT:
            return prompt, (m.token_ids, m.logprobs)
        prompt += m.token_ids
    raise AssertionError("no sampled turn")


def test_a_seat_trains_and_samples_with_its_own_adapter(tmp_path: Path) -> None:
    cfg = roles_config(tmp_path)
    trainer = RLTrainer(cfg)
    roles = trainer.roles
    assert roles is not None and roles.names == ["p1", "p2"]
    before = snapshot(roles)
    p1 = [t for t in step_games(trainer, 1) if t.metadata["seat"] == "p1"]
    assert p1
    assert trainer.self_play is not None
    advantages = trainer.self_play.advantages

    def train(part: list[Trajectory]) -> dict[str, float]:
        return rl_update.update(trainer, cfg, part, role_advantages=advantages)

    metrics = roles.update(p1, train)
    assert metrics["trained_trajectories/p1"] == len(p1)
    after = snapshot(roles)
    # p1's adapter moved; p2's and the base's are bitwise what they were.
    assert any(not torch.equal(a, b) for a, b in zip(before["p1"], after["p1"], strict=True))
    for name in ("p2", BASE):
        assert all(torch.equal(a, b) for a, b in zip(before[name], after[name], strict=True))

    roles.publish(1)
    games = step_games(trainer, 2)
    assert {t.model for t in games} == {f"{roles.policy.name}:p1", f"{roles.policy.name}:p2"}
    prompt, sampled = first_turn(next(t for t in games if t.metadata["seat"] == "p1"))
    # The engine's lean forward against PEFT's fp32 forward: within 1e-4.
    assert gap(roles, "p1", prompt, sampled) < 1e-4
    assert gap(roles, "p2", prompt, sampled) > 1e-3  # p2's adapter did not sample it
    # The untrained model forfeits p1's first move, so p2 never moves: its seat samples the
    # same prompt here.
    seat2 = roles.seat_policies()["p2"]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=4, seed=0)
    done = asyncio.run(seat2.generate(prompt, sampling))
    other = (done.token_ids, done.logprobs)
    assert gap(roles, "p2", prompt, other) < 1e-4
    assert gap(roles, "p1", prompt, other) > 1e-3
    roles.close()


def test_a_checkpoint_keeps_every_adapter(tmp_path: Path) -> None:
    cfg = roles_config(tmp_path, checkpoint_every=1)
    trainer = RLTrainer(cfg)
    result = trainer.train()
    assert trainer.roles is not None
    trained = snapshot(trainer.roles)
    assert result.final_dir is not None
    for name in ("p1", "p2"):
        assert (result.final_dir / "adapter" / name / "adapter_config.json").is_file()
    saved = latest_checkpoint(tmp_path)
    assert saved is not None
    fresh = RLTrainer(roles_config(tmp_path / "again"))
    assert fresh.roles is not None
    untrained = snapshot(fresh.roles)
    load_checkpoint(fresh.parts, saved)
    loaded = snapshot(fresh.roles)
    # p1 trained; p2 never moved (the untrained model forfeits p1's first move), and a
    # checkpoint saved before a role trained still resumes.
    assert any(not torch.equal(a, b) for a, b in zip(untrained["p1"], trained["p1"], strict=True))
    for name in ("p1", "p2"):
        assert all(torch.equal(a, b) for a, b in zip(trained[name], loaded[name], strict=True))
    fresh.roles.close()


def test_per_role_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"self_play\.per_role: needs model\.lora"):
        roles_config(tmp_path, model={"spec": "tiny"})
    with pytest.raises(ValidationError, match=r"self_play\.per_role: needs opponent: self"):
        roles_config(tmp_path, self_play={"per_role": True, "opponent": "pool"})
    with pytest.raises(ConfigError, match=r"self_play\.per_role: 'p3' is no seat of kuhn-poker"):
        RLTrainer(roles_config(tmp_path, self_play={"per_role": {"p1": "a", "p3": "b"}}))
    with pytest.raises(ConfigError, match=r"self_play\.per_role: no adapter for 'p2'"):
        RLTrainer(roles_config(tmp_path, self_play={"per_role": {"p1": "a"}}))
