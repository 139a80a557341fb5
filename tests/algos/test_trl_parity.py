"""Our losses equal TRL's GRPO losses, computed by TRL's own code.

TRL's loss lives in ``trl.trainer.grpo_trainer.GRPOTrainer._compute_loss`` (TRL 1.16.0). It
needs a trainer only for a handful of attributes and for the model forward
(``_get_per_token_logps_and_entropies``), so we call the unbound method with a small stand-in
object whose forward returns our per-token logprobs. The arithmetic that runs is TRL's.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from trajforge.algos import policy_loss

trl = pytest.importorskip("trl")
grpo_trainer = pytest.importorskip("trl.trainer.grpo_trainer")

B, T = 5, 11


def trl_loss(
    logprobs: torch.Tensor,
    old: torch.Tensor,
    seq_advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    loss_type: str,
    epsilon_low: float,
    epsilon_high: float,
    importance_sampling_level: str = "token",
    beta: float = 0.0,
    ref: torch.Tensor | None = None,
    max_completion_length: int = T,
) -> torch.Tensor:
    """TRL's ``_compute_loss`` on given logprobs (one process, no gradient accumulation)."""

    def forward(*_args: Any, **_kwargs: Any) -> tuple[torch.Tensor, torch.Tensor, None]:
        return logprobs, torch.zeros_like(logprobs), None

    fake = SimpleNamespace(
        _get_per_token_logps_and_entropies=forward,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=importance_sampling_level,
        beta=beta,
        loss_type=loss_type,
        epsilon_low=epsilon_low,
        epsilon_high=epsilon_high,
        args=SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=1),
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        model=SimpleNamespace(training=True),
        accelerator=SimpleNamespace(
            num_processes=1,
            reduce=lambda t, reduction="sum": t,
            gather=lambda t: t,
            gather_for_metrics=lambda t: t,
            sync_gradients=True,
        ),
        current_gradient_accumulation_steps=1,
        max_completion_length=max_completion_length,
        _entropy_bonus_enabled=False,
        aux_loss_enabled=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
    )
    inputs: dict[str, Any] = {
        "prompt_ids": torch.zeros(B, 2, dtype=torch.long),
        "prompt_mask": torch.ones(B, 2, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask.long(),
        "advantages": seq_advantages,
        "old_per_token_logps": old,
        "num_items_in_batch": mask.sum().float(),
    }
    if ref is not None:
        inputs["ref_per_token_logps"] = ref
    return grpo_trainer.GRPOTrainer._compute_loss(fake, None, inputs)


def random_case(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([11, 3, 7, 1, 9])
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    logprobs = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 4
    old = logprobs + 0.3 * torch.randn(B, T, generator=gen, dtype=torch.float64)
    seq_adv = torch.randn(B, generator=gen, dtype=torch.float64)
    return logprobs, old, seq_adv, mask


def run_both(
    seed: int, ours: dict[str, Any], theirs: dict[str, Any], with_ref: bool = False
) -> None:
    logprobs, old, seq_adv, mask = random_case(seed)
    ref = None
    if with_ref:
        noise = torch.randn(B, T, generator=torch.Generator().manual_seed(seed + 1))
        ref = logprobs + 0.1 * noise.double()
    lp_trl = logprobs.clone().requires_grad_()
    expected = trl_loss(lp_trl, old, seq_adv, mask, ref=ref, **theirs)
    expected.backward()

    lp_ours = logprobs.clone().requires_grad_()
    adv = seq_adv.unsqueeze(1).expand(B, T)
    got, metrics = policy_loss(ours.pop("name"), lp_ours, old, adv, mask, ref_logprobs=ref, **ours)
    got.backward()
    # The random cases are sized so that the clip is active somewhere: both branches run.
    assert metrics["clip_frac"] > 0

    assert lp_trl.grad is not None and lp_ours.grad is not None
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(lp_ours.grad, lp_trl.grad * mask, atol=1e-6, rtol=0)


def test_trl_version_is_the_one_the_call_was_written_for() -> None:
    # The stand-in object mirrors the attributes _compute_loss reads in this version.
    assert trl.__version__ == "1.16.0"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_clip_token_mean_equals_trl_dapo(seed: int) -> None:
    run_both(
        seed,
        {"name": "ppo_clip", "aggregation": "token-mean", "eps_low": 0.2, "eps_high": 0.28},
        {"loss_type": "dapo", "epsilon_low": 0.2, "epsilon_high": 0.28},
    )


def test_ppo_clip_with_k3_kl_equals_trl_dapo_with_beta() -> None:
    run_both(
        4,
        {"name": "ppo_clip", "eps_low": 0.2, "eps_high": 0.28, "kl_coef": 0.04, "kl_kind": "k3"},
        {"loss_type": "dapo", "epsilon_low": 0.2, "epsilon_high": 0.28, "beta": 0.04},
        with_ref=True,
    )


def test_ppo_clip_seq_mean_token_mean_equals_trl_grpo() -> None:
    run_both(
        5,
        {"name": "ppo_clip", "aggregation": "seq-mean-token-mean", "eps_low": 0.2, "eps_high": 0.2},
        {"loss_type": "grpo", "epsilon_low": 0.2, "epsilon_high": 0.2},
    )


def test_gspo_equals_trl_sequence_level_importance_sampling() -> None:
    run_both(
        6,
        {"name": "gspo", "aggregation": "seq-mean-token-mean", "eps_low": 0.01, "eps_high": 0.02},
        {
            "loss_type": "grpo",
            "epsilon_low": 0.01,
            "epsilon_high": 0.02,
            "importance_sampling_level": "sequence",
        },
    )


def test_cispo_equals_trl_cispo() -> None:
    # TRL's cispo bounds the weight above by epsilon_high itself (ScaleRL's eps_max = 5), with
    # no lower bound: our eps_high is the distance from 1.
    run_both(
        7,
        {"name": "cispo", "eps_high": 0.3},
        {"loss_type": "cispo", "epsilon_low": 0.2, "epsilon_high": 1.3},
    )


def test_ppo_clip_sum_norm_equals_trl_dr_grpo() -> None:
    run_both(
        8,
        {
            "name": "ppo_clip",
            "aggregation": "seq-mean-token-sum-norm",
            "max_length": 16,
            "eps_low": 0.2,
            "eps_high": 0.2,
        },
        {
            "loss_type": "dr_grpo",
            "epsilon_low": 0.2,
            "epsilon_high": 0.2,
            "max_completion_length": 16,
        },
    )
