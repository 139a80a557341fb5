"""SFT, DPO and RL run a few steps each on the embedded SmolLM2-135M (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest
from train_helpers import qa_trajectory

from trajforge.curate import preference_pairs
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.train.config import (
    DPOConfig,
    LoraSettings,
    ModelSettings,
    OptimSettings,
    RLConfig,
    SFTConfig,
)
from trajforge.train.data import expert_trajectories
from trajforge.train.dpo import DPOTrainer
from trajforge.train.rl import RLTrainer
from trajforge.train.sft import SFTTrainer

pytestmark = pytest.mark.slow

SMOL = ModelSettings(spec="embedded", lora=LoraSettings(r=8, alpha=16))
QUIET = {"tensorboard": False, "progress": False}


def test_sft_on_smollm2_expert_trajectories(tmp_path: Path, machine_precision: str) -> None:
    data = expert_trajectories("calculator", 4, load_tokenizer(), seed=0)
    assert all(t.outcome.reward == 1.0 for t in data)
    top = [26, 27, 28, 29]
    cfg = SFTConfig(
        output_dir=tmp_path,
        model=ModelSettings(spec="embedded", lora=LoraSettings(r=8, alpha=16, layers=top)),
        optim=OptimSettings(lr=2e-3),
        batch_size=1,
        max_steps=3,
        **QUIET,
    )
    trainer = SFTTrainer(cfg, data)
    adapted = {
        n.split(".layers.")[1].split(".")[0]
        for n, p in trainer.parts.model.named_parameters()
        if p.requires_grad
    }
    assert adapted == {str(i) for i in top}
    result = trainer.train()
    assert result.precision == machine_precision
    hist = result.history
    assert len(hist) == 3 and all(h["loss"] > 0 for h in hist)
    assert (tmp_path / "final" / "adapter" / "adapter_config.json").exists()
    # The final folder itself holds the merged weights, loadable without PEFT.
    assert (tmp_path / "final" / "config.json").exists()
    assert not (tmp_path / "final" / "adapter_config.json").exists()


def test_dpo_on_smollm2(tmp_path: Path) -> None:
    tok = load_tokenizer()
    trajs = []
    for a in range(2):
        q = f"What is {a} plus 2?"
        trajs.append(qa_trajectory(tok, q, f"The answer is {a + 2}.", group_id=f"g{a}", reward=1.0))
        trajs.append(qa_trajectory(tok, q, "No idea.", group_id=f"g{a}", reward=0.0))
    cfg = DPOConfig(
        output_dir=tmp_path,
        model=SMOL,
        optim=OptimSettings(lr=1e-3),
        batch_size=2,
        epochs=2,
        **QUIET,
    )
    hist = DPOTrainer(cfg, preference_pairs(trajs, min_margin=0.5)).train().history
    assert len(hist) == 2
    assert hist[0]["loss"] == pytest.approx(0.6931, abs=1e-3)
    assert hist[-1]["loss"] < hist[0]["loss"]


def test_rl_on_smollm2_calculator(tmp_path: Path, machine_precision: str) -> None:
    cfg = RLConfig(
        output_dir=tmp_path,
        model=SMOL,
        env="calculator",
        num_tasks=2,
        groups_per_step=1,
        samples_per_group=2,
        steps=2,
        max_new_tokens=24,
        max_turns=2,
        kl_coef=0.01,
        optim=OptimSettings(lr=1e-4),
        **QUIET,
    )
    trainer = RLTrainer(cfg)
    # auto precision: the rollout copy is bf16 exactly where the machine has native bf16.
    assert trainer.weights.policy.precision == machine_precision
    hist = trainer.train().history
    assert [h["step"] for h in hist] == [1, 2]
    assert all("reward_mean" in h and "zero_adv_frac" in h for h in hist)
