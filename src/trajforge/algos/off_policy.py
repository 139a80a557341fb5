"""Corrections for tokens sampled by other weights than the ones trained, as pure functions.

The sampler (a bf16 copy, an inference engine, weights one or more updates old in asynchronous
RL) gave each sampled token the probability ``pi_rollout``; the trainer's forward gives it
``pi_train``. Their ratio ``r_t = pi_train / pi_rollout`` (``exp`` of the log-probability
difference) is 1 where the two agree. Each correction turns the ratios into a per-token weight
that multiplies the token's advantage (every policy loss here is linear in the advantage, so the
weight acts on the token's loss):

- ``token_tis``: truncated importance sampling, ``min(r_t, cap)`` (Yao et al. 2025, "Your
  Efficient RL Framework Secretly Brings You Off-Policy RL Training"; verl's
  ``tis_imp_ratio_cap``);
- ``seq_mis``: sequence-level masked importance sampling, a sequence whose ratio
  ``prod_t r_t`` leaves ``[low, high]`` is left out whole (Liu et al. 2025, "When Speed Kills
  Stability: Demystifying RL Collapse from the Training-Inference Mismatch");
- ``icepop``: a token whose ratio leaves ``[low, high]`` is left out, the others kept at
  weight 1 (Ling Team 2025, "IcePop", Ring-1T's discrepancy masking).

Tensors are ``[B, T]`` in the training token layout; entries off ``mask`` get weight 1 and
never count.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from trajforge.algos.names import RolloutCorrection
from trajforge.errors import ConfigError

DEFAULT_BANDS: dict[RolloutCorrection, tuple[float, float]] = {
    RolloutCorrection.SEQ_MIS: (0.5, 2.0),
    RolloutCorrection.ICEPOP: (0.5, 5.0),
}
"""The ``[low, high]`` band of each masking correction when the config names none."""


def _log_ratio(logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor) -> Tensor:
    """``log pi_train - log pi_rollout`` on the mask, 0 off it (padding may hold anything)."""
    diff = logprobs.detach().float() - rollout_logprobs.detach().float()
    return torch.where(mask.bool(), diff, torch.zeros_like(diff))


def _check_band(low: float, high: float, what: str) -> None:
    if not 0 <= low <= 1 <= high:
        raise ConfigError(f"{what}: band [{low:g}, {high:g}] must hold 1 (0 <= low <= 1 <= high)")


def truncated_is_weights(
    logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor, cap: float
) -> Tensor:
    """Truncated importance weights ``min(pi / pi_rollout, cap)`` per token (1 off the mask).

    ``logprobs`` are the trainer's for the sampled tokens, ``rollout_logprobs`` the sampler's:
    multiplying the advantages by these weights turns the sampler's tokens into an estimate of
    the trainer's policy gradient, the cap bounding its variance."""
    if cap <= 0:
        raise ConfigError(f"truncated importance sampling: cap {cap} must be > 0")
    ratio = torch.exp(_log_ratio(logprobs, rollout_logprobs, mask).clamp(max=math.log(cap)))
    return torch.where(mask.bool(), ratio, torch.ones_like(ratio))


def icepop_weights(
    logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor, low: float, high: float
) -> Tensor:
    """1 for a token whose ratio ``pi / pi_rollout`` lies in ``[low, high]`` (and off the
    mask), 0 for one outside: the tokens the two disagree on most leave the gradient."""
    _check_band(low, high, "icepop")
    ratio = torch.exp(_log_ratio(logprobs, rollout_logprobs, mask))
    inside = (ratio >= low) & (ratio <= high)
    return (inside | ~mask.bool()).float()


def sequence_mis_weights(
    logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor, low: float, high: float
) -> Tensor:
    """1 for every token of a sequence whose ratio ``prod_t pi / pi_rollout`` (over its
    masked tokens) lies in ``[low, high]``, 0 for every token of one outside (1 off the
    mask): a sequence the sampler drew unlike the trained policy leaves the gradient whole."""
    _check_band(low, high, "seq_mis")
    seq_log_ratio = _log_ratio(logprobs, rollout_logprobs, mask).sum(dim=-1, keepdim=True)
    floor = math.log(low) if low > 0 else -math.inf
    inside = (seq_log_ratio >= floor) & (seq_log_ratio <= math.log(high))
    return (inside.expand_as(mask) | ~mask.bool()).float()


def correction_weights(
    kind: RolloutCorrection,
    logprobs: Tensor,
    rollout_logprobs: Tensor,
    mask: Tensor,
    *,
    cap: float | None = None,
    band: tuple[float, float] | None = None,
) -> Tensor | None:
    """The per-token weights of correction ``kind`` (``None``: no correction; ``token_tis``
    without a ``cap`` is none). ``band``: the masking corrections' ``[low, high]``
    (``DEFAULT_BANDS`` when ``None``)."""
    if kind is RolloutCorrection.NONE or (kind is RolloutCorrection.TOKEN_TIS and cap is None):
        return None
    if kind is RolloutCorrection.TOKEN_TIS:
        assert cap is not None
        return truncated_is_weights(logprobs, rollout_logprobs, mask, cap)
    low, high = band if band is not None else DEFAULT_BANDS[kind]
    if kind is RolloutCorrection.ICEPOP:
        return icepop_weights(logprobs, rollout_logprobs, mask, low, high)
    return sequence_mis_weights(logprobs, rollout_logprobs, mask, low, high)


def mismatch_metrics(logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor) -> dict[str, float]:
    """How far the trainer's probabilities of the sampled tokens are from the sampler's, over
    the mask: ``abs_log_ratio`` the mean ``|log pi - log pi_rollout|``, ``kl`` Schulman's k3
    estimate of ``KL(pi_rollout || pi)`` from the sampler's own tokens (``r - 1 - log r``,
    never negative, 0 only where the two agree), ``log_ratio_max`` the largest
    ``|log pi - log pi_rollout|``, ``kl_turn_start`` the k3 estimate over each turn's first
    token alone (the first of a run of masked tokens): there an agent decides what to do (call
    a tool, answer), and a policy that moved on that decision shows it, where the mean over
    every token, most of them near-deterministic, does not."""
    m = mask.bool()
    n = int(m.sum())
    if n == 0:
        return {"abs_log_ratio": 0.0, "kl": 0.0, "log_ratio_max": 0.0, "kl_turn_start": 0.0}
    log_ratio = _log_ratio(logprobs, rollout_logprobs, mask)
    k3 = torch.expm1(log_ratio) - log_ratio
    before = torch.nn.functional.pad(m[..., :-1], (1, 0), value=False)
    starts = m & ~before
    return {
        "abs_log_ratio": float(log_ratio[m].abs().sum()) / n,
        "kl": float(k3[m].sum()) / n,
        "log_ratio_max": float(log_ratio[m].abs().max()),
        "kl_turn_start": float(k3[starts].mean()),
    }


def within_staleness(staleness: Tensor, mask: Tensor, bound: int) -> Tensor:
    """The mask less the tokens sampled by weights more than ``bound`` updates older than the
    trained ones (``staleness[b, t]``: updates between the weights that sampled token ``t`` and
    the trained weights; 0 where not known)."""
    if bound < 0:
        raise ConfigError(f"staleness bound {bound} must be >= 0")
    return mask.bool() & (staleness <= bound)
