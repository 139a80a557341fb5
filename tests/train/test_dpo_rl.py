"""DPO and RL run end to end on the tiny model with loss and reward logged."""

from __future__ import annotations

import asyncio
import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from rich.console import Console
from train_helpers import qa_trajectory, small_rl_config, token_id_rubric

from trajforge.algos import AdvantageInput, compute_advantages
from trajforge.curate import group_key, preference_pairs
from trajforge.errors import ConfigError
from trajforge.pipeline.config import load_experiment
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.schema import Fault, Trajectory, is_infra_failure
from trajforge.store import TrajectoryStore
from trajforge.train.config import (
    DPOConfig,
    LoraSettings,
    ModelSettings,
    OptimSettings,
    RLConfig,
    parse_config,
)
from trajforge.train.dpo import DPOTrainer, dpo_loss
from trajforge.train.rl import RLTrainer
from trajforge.train.rl import update as rl_update


def test_dpo_loss_matches_hand_computed_value() -> None:
    pc, pr, rc, rr = (torch.tensor([v]) for v in (-3.0, -5.0, -4.0, -4.0))
    losses, z = dpo_loss(pc, pr, rc, rr, beta=0.5)
    assert z.item() == pytest.approx(0.5 * ((1.0) - (-1.0)))
    assert losses.item() == pytest.approx(-torch.nn.functional.logsigmoid(torch.tensor(1.0)).item())


def _pairs():  # type: ignore[no-untyped-def]
    tok = tiny_model_and_tokenizer()[1]
    trajs = []
    for a in range(3):
        q = f"What is {a} plus 1?"
        trajs.append(qa_trajectory(tok, q, f"The answer is {a + 1}.", group_id=f"g{a}", reward=1.0))
        trajs.append(qa_trajectory(tok, q, "I do not know.", group_id=f"g{a}", reward=0.0))
    return preference_pairs(trajs, min_margin=0.5)


@pytest.mark.parametrize("lora", [True, False])
def test_dpo_runs_and_prefers_chosen(tmp_path: Path, lora: bool) -> None:
    pairs = _pairs()
    assert len(pairs) == 3
    cfg = DPOConfig(
        output_dir=tmp_path,
        model=ModelSettings(lora=LoraSettings(r=4, alpha=8) if lora else None),
        optim=OptimSettings(lr=1e-2 if lora else 3e-3),
        beta=0.5,
        batch_size=3,
        epochs=3,
        micro_batch_tokens=300,
        tensorboard=True,
        progress=False,
    )
    trainer = DPOTrainer(cfg, pairs)
    assert trainer.reference.shares_weights is lora
    result = trainer.train()
    hist = result.history
    assert len(hist) == 3
    assert hist[0]["loss"] == pytest.approx(0.6931, abs=1e-3)  # policy == reference at step 1
    assert hist[-1]["loss"] < hist[0]["loss"]
    assert hist[-1]["reward_margin"] > 0
    logged = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == [1, 2, 3] and "loss" in logged[0]
    assert any((tmp_path / "tensorboard").iterdir())


def test_rl_runs_on_calculator_with_tiny_model(tmp_path: Path) -> None:
    cfg = RLConfig(
        output_dir=tmp_path,
        env="calculator",
        num_tasks=4,
        groups_per_step=2,
        samples_per_group=2,
        steps=2,
        epochs_per_step=2,
        max_new_tokens=12,
        max_turns=2,
        kl_coef=0.05,
        optim=OptimSettings(lr=1e-3),
        replay={"enabled": True},
        tensorboard=False,
        progress=False,
    )
    trainer = RLTrainer(cfg, rubric=token_id_rubric())
    before = {n: p.detach().clone() for n, p in trainer.parts.model.named_parameters()}
    result = trainer.train()
    assert [h["step"] for h in result.history] == [1, 2]
    for h in result.history:
        for key in (
            "loss",
            "reward_mean",
            "reward_std",
            "kl_ref",
            "clip_frac",
            "entropy",
            "tokens_per_s",
            "step_time_s",
            "zero_adv_frac",
            "rollout_logprob_gap",
        ):
            assert key in h, key
        assert h["trained_trajectories"] == 4
        # The rollouts sampled from the very weights the first epoch trains (fp32, shared):
        # their logprobs agree with the training forward's.
        assert h["rollout_logprob_gap"] < 1e-4
    assert result.history[0]["zero_adv_frac"] < 1.0
    changed = [
        n for n, p in trainer.parts.model.named_parameters() if not torch.equal(p, before[n])
    ]
    assert changed
    assert (
        trainer.weights.policy.model is trainer.parts.model
    )  # rollouts sample from the trained weights
    assert trainer.task_cursor == 4


def test_rl_filters_zero_advantage_groups(tmp_path: Path) -> None:
    cfg = small_rl_config(tmp_path, max_new_tokens=6, filter_zero_advantage=True)
    # The random tiny model never solves a task: every group has zero advantage.
    result = RLTrainer(cfg).train()
    h = result.history[0]
    assert (
        h["zero_adv_frac"] == 1.0 and h["trained_trajectories"] == 0.0 and h["reward_mean"] == 0.0
    )


@pytest.mark.usefixtures("native_bf16")
def test_rl_bf16_rollouts_sample_from_a_copy_synced_after_each_update(tmp_path: Path) -> None:
    cfg = small_rl_config(tmp_path, optim={"lr": 1e-2}, model={"precision": "bf16"})
    trainer = RLTrainer(cfg, rubric=token_id_rubric())
    assert trainer.weights.policy.model is not trainer.parts.model
    assert next(trainer.weights.policy.model.parameters()).dtype is torch.bfloat16
    result = trainer.train()
    assert result.history[0]["trained_trajectories"] == 4
    trained = dict(trainer.parts.model.named_parameters())
    for name, param in trainer.weights.policy.model.named_parameters():
        assert torch.equal(param, trained[name].detach().to(torch.bfloat16)), name


def test_rl_bf16_rollouts_are_refused_without_native_bf16(tmp_path: Path) -> None:
    # The suite runs as on a machine without native bf16 (tests/conftest.py).
    cfg = small_rl_config(tmp_path, rollout_precision="bf16")
    with pytest.raises(ConfigError, match=r"^rollout_precision: bf16 was asked for"):
        RLTrainer(cfg)


def test_rl_auto_precision_rolls_out_in_fp32_without_native_bf16(tmp_path: Path) -> None:
    trainer = RLTrainer(small_rl_config(tmp_path))
    assert trainer.weights.policy.model is trainer.parts.unwrapped_model()
    assert next(trainer.weights.policy.model.parameters()).dtype is torch.float32


def test_rl_sign_weights_reach_the_trained_advantages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = small_rl_config(tmp_path, samples_per_group=3, negative_advantage_weight=0.0)
    trainer = RLTrainer(cfg, rubric=token_id_rubric())
    seen: list[list[float]] = []

    def capture(ops: Any, cfg: Any, seqs: list[Any], reference: Any) -> dict[str, float]:
        seen.extend(s.advantages for s in seqs)
        return {}

    monkeypatch.setattr(rl_update, "optimize", capture)
    trainer.train()
    values = [a for row in seen for a in row]
    assert any(a > 0 for a in values)
    assert min(values) == 0.0


@pytest.mark.usefixtures("native_bf16")
def test_rl_lora_bf16_rollouts_sample_from_the_merged_weights(tmp_path: Path) -> None:
    cfg = small_rl_config(
        tmp_path, optim={"lr": 1e-2}, model={"precision": "bf16", "lora": {"r": 4, "alpha": 8}}
    )
    trainer = RLTrainer(cfg, rubric=token_id_rubric())
    assert type(trainer.weights.policy.model).__name__ == "LlamaForCausalLM"
    trainer.train()
    merged = copy.deepcopy(trainer.parts.unwrapped_model()).merge_and_unload()
    for name, param in trainer.weights.policy.model.state_dict().items():
        assert torch.equal(param, merged.state_dict()[name].to(torch.bfloat16)), name
    base_q = merged.model.layers[0].self_attn.q_proj.weight
    untrained, _ = tiny_model_and_tokenizer()
    assert not torch.equal(base_q, untrained.model.layers[0].self_attn.q_proj.weight)


@pytest.mark.usefixtures("native_bf16")
def test_rl_rollout_logprob_gap_exposes_a_stale_rollout_copy(tmp_path: Path) -> None:
    def gaps(stale: bool) -> list[float]:
        cfg = small_rl_config(
            tmp_path / str(stale),
            steps=3,
            optim={"lr": 1e-2},
            model={"precision": "bf16", "lora": {"r": 4, "alpha": 8}},
            # The weights left behind are versions old: their tokens are kept in the loss.
            max_staleness=5,
        )
        trainer = RLTrainer(cfg, rubric=token_id_rubric())
        if stale:
            trainer.weights.refresh = lambda version: None  # type: ignore[method-assign]
        return [h["rollout_logprob_gap"] for h in trainer.train().history]

    synced, stale = gaps(stale=False), gaps(stale=True)
    # bf16 rollouts against the fp32 training forward differ by rounding only...
    assert max(synced) < 5e-3
    # ...while rollouts from weights left behind by the updates drift away from step 2 on.
    assert stale[0] < 5e-3 and min(stale[1:]) > 5 * max(synced)


USER_SCORERS = """
import asyncio

from trajforge.schema import Evaluator, EvaluatorKind, Score, Trajectory


def half(trajectory: Trajectory) -> float:
    return 0.5 if trajectory.task.id else 0.0


async def graded(trajectory: Trajectory) -> Score:
    await asyncio.sleep(0)
    evaluator = Evaluator(kind=EvaluatorKind.RULE, name="graded")
    return Score(name="graded", value=0.25, evaluator=evaluator)
"""


def _user_scorers(tmp_path: Path) -> Path:
    path = tmp_path / "my_scorers.py"
    path.write_text(USER_SCORERS)
    return path


def test_rl_reward_is_the_config_rubric_of_user_scorers(tmp_path: Path) -> None:
    scorers = _user_scorers(tmp_path)
    cfg = small_rl_config(
        tmp_path, scorers=[{"name": f"{scorers}:half", "weight": 2.0}, f"{scorers}:graded"]
    )
    trainer = RLTrainer(cfg)
    assert [s.name for s in trainer.rubric.scorers] == ["half", "graded"]
    h = trainer.train().history[0]
    # 2 x 0.5 + 1 x 0.25 on every sample, sync and async alike; the env's verdict is not in it.
    assert h["reward_mean"] == pytest.approx(1.25)
    assert h["reward_std"] == 0.0 and h["failed_scores"] == 0.0


def test_rl_default_reward_is_the_env_verdict(tmp_path: Path) -> None:
    trainer = RLTrainer(small_rl_config(tmp_path))
    assert [s.name for s in trainer.rubric.scorers] == ["env_verifier"]


def test_rl_scorers_that_do_not_load_fail_at_config_time(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"scorers: scorer '.*missing\.py:f': file .* not exist"):
        parse_config({"scorers": [f"{tmp_path}/missing.py:f"]}, RLConfig)
    with pytest.raises(ConfigError, match=r"unknown scorer 'numeric_mach' \(did you mean"):
        parse_config({"scorers": ["numeric_mach"]}, RLConfig)


def test_experiment_rl_stage_and_eval_use_user_scorers(tmp_path: Path) -> None:
    scorers = _user_scorers(tmp_path)
    experiment = {
        "name": "scored",
        "env": "calculator",
        "model": "tiny",
        "out_dir": str(tmp_path / "runs"),
        "eval": {
            "tasks": 2,
            "max_turns": 1,
            "max_new_tokens": 4,
            "scorers": ["process", f"{scorers}:graded"],
        },
        "stages": [
            {"kind": "eval", "name": "base"},
            {
                "kind": "rl",
                "train": {
                    "steps": 1,
                    "num_tasks": 2,
                    "groups_per_step": 1,
                    "samples_per_group": 2,
                    "max_new_tokens": 4,
                    "max_turns": 1,
                    "tensorboard": False,
                    "progress": False,
                    "scorers": [{"name": f"{scorers}:half", "weight": 1.0}],
                },
            },
        ],
    }
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(experiment))
    runner = ExperimentRunner(load_experiment(path), console=Console(quiet=True))
    results = {s["name"]: s for s in runner.run()["stages"]}
    assert results["rl"]["history"][0]["reward_mean"] == pytest.approx(0.5)
    assert results["base"]["summary"]["scores"]["graded"] == pytest.approx(0.25)
    with TrajectoryStore(runner.store_path) as db:
        base = db.query(run="scored.base")
    assert base and all({"process", "graded"} <= {s.name for s in t.scores} for t in base)


def _lose_to_infra(
    trainer: RLTrainer, monkeypatch: pytest.MonkeyPatch, per_group: list[int]
) -> tuple[list[Trajectory], list[Any]]:
    """Mark the first ``per_group[g]`` episodes of the g-th group of each step's rollouts as
    lost to the infrastructure (as a crashed tool server leaves them); returns the step's
    trajectories and the estimator's inputs and outputs as they are made."""
    rolled: list[Trajectory] = []
    seen: list[Any] = []
    episodes = trainer._episodes

    async def faulty(step: int, tasks: list[Any], *rest: Any) -> list[Trajectory]:
        trajs = await episodes(step, tasks, *rest)
        groups = list(dict.fromkeys(group_key(t) for t in trajs))
        for g, n in zip(groups, per_group, strict=True):
            for t in [t for t in trajs if group_key(t) == g][:n]:
                t.outcome = t.outcome.model_copy(update={"fault": Fault.INFRA})
        rolled.extend(trajs)
        return trajs

    def estimator(name: str, inp: AdvantageInput, **kw: Any) -> Any:
        out = compute_advantages(name, inp, **kw)
        seen.append((inp, out))
        return out

    monkeypatch.setattr(trainer, "_episodes", faulty)
    monkeypatch.setattr(rl_update, "compute_advantages", estimator)
    monkeypatch.setattr(rl_update, "optimize", lambda *args: {})
    return rolled, seen


def test_rl_leaves_episodes_lost_to_the_infrastructure_out_of_the_advantages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = RLTrainer(small_rl_config(tmp_path, samples_per_group=3), rubric=token_id_rubric())
    rolled, seen = _lose_to_infra(trainer, monkeypatch, [1, 2])
    (metrics,) = trainer.train().history
    assert metrics["infra_failures"] == 3.0
    assert metrics["infra_skipped_groups"] == 1.0  # the second group was left with one
    assert metrics["trained_trajectories"] == 2.0
    ((inp, out),) = seen
    kept = [t for t in rolled if not is_infra_failure(t)][:2]
    assert inp.group_ids == [group_key(t) for t in kept] and len(set(inp.group_ids)) == 1
    rewards = [asyncio.run(token_id_rubric().evaluate(t))[0] for t in kept]
    assert inp.rewards.tolist() == pytest.approx(rewards)
    # GRPO over the two that are left: +-(r0 - r1) / 2 / (|r0 - r1| / sqrt(2) + eps), or 0.
    gap = rewards[0] - rewards[1]
    a = 0.0 if gap == 0 else (gap / 2) / (abs(gap) / math.sqrt(2) + 1e-6)
    assert out.turn_advantages[:, 0].tolist() == pytest.approx([a, -a], abs=1e-5)


def test_rl_infra_failures_zero_trains_on_them_like_any_episode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = small_rl_config(tmp_path, samples_per_group=3, infra_failures="zero")
    trainer = RLTrainer(cfg, rubric=token_id_rubric())
    rolled, seen = _lose_to_infra(trainer, monkeypatch, [1, 2])
    (metrics,) = trainer.train().history
    assert metrics["infra_failures"] == 3.0
    assert "infra_skipped_groups" not in metrics
    assert metrics["trained_trajectories"] == 6.0
    ((inp, _),) = seen
    assert inp.group_ids == [group_key(t) for t in rolled]
