"""The built-in losses of the Tinker API, as the SDK's documentation defines them: cross entropy
here, the policy-gradient ones ``trajforge.algos``' (PPO's clip, CISPO, importance sampling, DRO).

Each loss takes one datum's target logprobs (``[N]``, position i scoring ``target_tokens[i]``
after ``model_input[: i + 1]``) and that datum's ``loss_fn_inputs`` and returns the datum's loss,
a sum over its tokens (Tinker sums; it never averages). A batch's loss is the sum over its
datums, reported as the metric ``loss:sum``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum

import numpy as np
import torch

from trajforge.algos import TokenLoss, cispo, dro, importance_sampling, ppo_clip
from trajforge.tinker.errors import UserError


class LossFn(StrEnum):
    CROSS_ENTROPY = "cross_entropy"
    IMPORTANCE_SAMPLING = "importance_sampling"
    PPO = "ppo"
    CISPO = "cispo"
    DRO = "dro"


REQUIRED: dict[LossFn, tuple[str, ...]] = {
    LossFn.CROSS_ENTROPY: ("target_tokens", "weights"),
    **{
        loss: ("target_tokens", "logprobs", "advantages")
        for loss in (LossFn.IMPORTANCE_SAMPLING, LossFn.PPO, LossFn.CISPO, LossFn.DRO)
    },
}
"""The ``loss_fn_inputs`` each loss reads (``weights`` of cross entropy defaults to ones)."""

CONFIG_DEFAULTS: dict[LossFn, dict[str, float]] = {
    LossFn.CROSS_ENTROPY: {},
    LossFn.IMPORTANCE_SAMPLING: {},
    LossFn.PPO: {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    LossFn.CISPO: {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    LossFn.DRO: {"beta": 0.05},
}
"""``loss_fn_config`` keys each loss takes, with their defaults."""

NOT_SERVED = {
    "gspo": "its sequence-level ratio is not served here",
    "stable_reinforce": "it needs the sampler's stability records, which this server keeps none of",
    "custom": "use forward_backward_custom, which runs the loss in your process",
}


def loss_fn(name: str, config: Mapping[str, float]) -> tuple[LossFn, dict[str, float]]:
    """The loss named ``name`` and its config (defaults filled in); an unknown name or key is a
    ``UserError`` naming it."""
    try:
        loss = LossFn(name)
    except ValueError:
        why = NOT_SERVED.get(name)
        if why is not None:
            raise UserError(f"loss_fn: {name!r} is not supported by this server: {why}") from None
        known = ", ".join(loss.value for loss in LossFn)
        raise UserError(f"loss_fn: unknown loss {name!r}; this server has {known}") from None
    defaults = CONFIG_DEFAULTS[loss]
    unknown = sorted(set(config) - set(defaults))
    if unknown:
        allowed = ", ".join(defaults) or "none"
        raise UserError(
            f"loss_fn_config: {', '.join(unknown)} not taken by {name!r} (it takes {allowed})"
        )
    return loss, {**defaults, **config}


def check_inputs(loss: LossFn, index: int, tokens: int, inputs: Mapping[str, np.ndarray]) -> None:
    """Refuse datum ``index`` when an input the loss needs is missing or is not one value per
    input token."""
    for name in REQUIRED[loss]:
        if name not in inputs:
            if loss is LossFn.CROSS_ENTROPY and name == "weights":
                continue
            raise UserError(f"data[{index}].loss_fn_inputs: {loss.value!r} needs {name!r}")
    for name, array in inputs.items():
        if array.shape != (tokens,):
            raise UserError(
                f"data[{index}].loss_fn_inputs[{name!r}]: shape {list(array.shape)} does not "
                f"match model_input, which has {tokens} tokens (expected [{tokens}])"
            )


LossBody = Callable[[torch.Tensor, Mapping[str, torch.Tensor], Mapping[str, float]], torch.Tensor]


def _cross_entropy(
    lp: torch.Tensor, x: Mapping[str, torch.Tensor], _: Mapping[str, float]
) -> torch.Tensor:
    weights = x.get("weights")
    return -(lp * weights).sum() if weights is not None else -lp.sum()


def _policy_loss(
    fn: Callable[..., TokenLoss],
    lp: torch.Tensor,
    x: Mapping[str, torch.Tensor],
    **options: float,
) -> torch.Tensor:
    """``algos``' loss ``fn`` over one datum's tokens, summed (Tinker sums; every token counts)."""
    every = torch.ones_like(lp, dtype=torch.bool)
    return fn(lp, x["logprobs"], x["advantages"], every, **options).loss.sum()


def _importance_sampling(
    lp: torch.Tensor, x: Mapping[str, torch.Tensor], _: Mapping[str, float]
) -> torch.Tensor:
    return _policy_loss(importance_sampling, lp, x)


def _ppo(lp: torch.Tensor, x: Mapping[str, torch.Tensor], c: Mapping[str, float]) -> torch.Tensor:
    # Tinker's thresholds bound the ratio itself; algos' clip is a distance from 1.
    low, high = 1.0 - c["clip_low_threshold"], c["clip_high_threshold"] - 1.0
    return _policy_loss(ppo_clip, lp, x, eps_low=low, eps_high=high)


def _cispo(lp: torch.Tensor, x: Mapping[str, torch.Tensor], c: Mapping[str, float]) -> torch.Tensor:
    low, high = 1.0 - c["clip_low_threshold"], c["clip_high_threshold"] - 1.0
    return _policy_loss(cispo, lp, x, eps_low=low, eps_high=high)


def _dro(lp: torch.Tensor, x: Mapping[str, torch.Tensor], c: Mapping[str, float]) -> torch.Tensor:
    return _policy_loss(dro, lp, x, beta=c["beta"])


BODIES: dict[LossFn, LossBody] = {
    LossFn.CROSS_ENTROPY: _cross_entropy,
    LossFn.IMPORTANCE_SAMPLING: _importance_sampling,
    LossFn.PPO: _ppo,
    LossFn.CISPO: _cispo,
    LossFn.DRO: _dro,
}


def datum_loss(
    loss: LossFn,
    logprobs: torch.Tensor,
    inputs: Mapping[str, np.ndarray],
    config: Mapping[str, float],
) -> torch.Tensor:
    """One datum's loss from its target ``logprobs`` and float inputs."""
    tensors = {
        name: torch.tensor(np.asarray(array, dtype=np.float32), device=logprobs.device)
        for name, array in inputs.items()
        if name != "target_tokens"
    }
    return BODIES[loss](logprobs, tensors, config)
