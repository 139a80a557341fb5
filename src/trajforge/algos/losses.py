"""Policy-gradient losses over per-token logprobs, chosen by name with ``policy_loss``.

Every tensor is ``[B, T]`` in the training token layout: ``logprobs[b, t]`` is the current
policy's log-probability of token ``t``, ``old_logprobs`` the behaviour policy's (recorded at
rollout), ``advantages`` come from ``compute_advantages`` and ``mask`` is the loss mask (the
assistant-sampled tokens). Entries off the mask are ignored whatever they hold (padding may be
``nan`` or ``inf``) and never receive gradient. ``rho_t = exp(logprobs_t - old_logprobs_t)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from trajforge.algos.kl import kl_estimate
from trajforge.algos.metrics import entropy_from_logits, masked_mean, masked_std
from trajforge.algos.names import Aggregation, LossName
from trajforge.errors import ConfigError
from trajforge.registry import Registry, keyword_options, refuse_unknown_options

if TYPE_CHECKING:
    from torch import Tensor


@dataclass(frozen=True)
class TokenLoss:
    """Per-token loss ``[B, T]`` and where the clip was active, low and high side."""

    loss: Tensor
    clipped_low: Tensor
    clipped_high: Tensor


def _clipped_surrogate(
    ratio: Tensor, advantages: Tensor, eps_low: float, eps_high: float
) -> TokenLoss:
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss = -torch.min(ratio * advantages, clipped * advantages)
    # The clip is active (zero gradient) exactly where min() picks the clipped term.
    low = (ratio < 1.0 - eps_low) & (advantages < 0)
    high = (ratio > 1.0 + eps_high) & (advantages > 0)
    return TokenLoss(loss=loss, clipped_low=low, clipped_high=high)


def ppo_clip(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
) -> TokenLoss:
    """PPO's clipped surrogate with an asymmetric clip range.

    ``L_t = -min(rho_t A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) A_t)``.

    Schulman et al. 2017, "Proximal Policy Optimization Algorithms", arXiv:1707.06347; the
    decoupled upper bound is DAPO's clip-higher (Yu et al. 2025, "DAPO: An Open-Source LLM
    Reinforcement Learning System at Scale", arXiv:2503.14476, which uses eps_low = 0.2,
    eps_high = 0.28).
    """
    return _clipped_surrogate(torch.exp(logprobs - old_logprobs), advantages, eps_low, eps_high)


def gspo(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
) -> TokenLoss:
    """GSPO: a clipped surrogate on the length-normalised sequence-level ratio.

    ``s_i = exp((1/|y_i|) sum_t log(pi(y_{i,t}) / pi_old(y_{i,t})))`` over the masked tokens of
    sequence ``i`` (all its assistant turns). Implemented as GSPO-token so that advantages may
    vary per token: ``s_{i,t} = sg[s_i] * pi(y_{i,t}) / sg[pi(y_{i,t})]`` (equal to ``s_i`` in value)
    and ``L_{i,t} = -min(s_{i,t} A_{i,t}, clip(s_{i,t}, 1 - eps_low, 1 + eps_high) A_{i,t})``.
    With one advantage per sequence and aggregation ``seq-mean-token-mean`` this is exactly
    the paper's GSPO objective, value and gradient. Defaults are the paper's clip range.

    Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv:2507.18071.
    """
    m = mask.to(logprobs.dtype)
    log_s = ((logprobs - old_logprobs) * m).sum(dim=-1) / m.sum(dim=-1).clamp(min=1.0)
    log_s_token = log_s.detach().unsqueeze(-1) + logprobs - logprobs.detach()
    return _clipped_surrogate(torch.exp(log_s_token), advantages, eps_low, eps_high)


def cispo(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float | None = None,
    eps_high: float = 4.0,
) -> TokenLoss:
    """CISPO: REINFORCE weighted by a clipped, stop-gradient importance weight.

    ``L_t = -sg(clip(rho_t, 1 - eps_low, 1 + eps_high)) A_t log pi(y_t)``; every token keeps
    its gradient, only the weight is bounded. ``eps_low=None`` imposes no lower bound, as
    MiniMax-M1 does; ``eps_high = 4`` gives ScaleRL's ``eps_max = 5`` (arXiv:2510.13786).

    MiniMax et al. 2025, "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning
    Attention", arXiv:2506.13585, eq. 4-5.
    """
    ratio = torch.exp(logprobs - old_logprobs).detach()
    low_bound = None if eps_low is None else 1.0 - eps_low
    weight = ratio.clamp(min=low_bound, max=1.0 + eps_high)
    loss = -weight * advantages * logprobs
    low = torch.zeros_like(mask, dtype=torch.bool) if low_bound is None else ratio < low_bound
    return TokenLoss(loss=loss, clipped_low=low, clipped_high=ratio > 1.0 + eps_high)


def reinforce(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor
) -> TokenLoss:
    """Plain REINFORCE: ``L_t = -A_t log pi(y_t)`` (on-policy; ``old_logprobs`` feed metrics only).

    Williams 1992, "Simple Statistical Gradient-Following Algorithms for Connectionist
    Reinforcement Learning", Machine Learning 8:229-256.
    """
    none = torch.zeros_like(mask, dtype=torch.bool)
    return TokenLoss(loss=-advantages * logprobs, clipped_low=none, clipped_high=none)


def importance_sampling(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor
) -> TokenLoss:
    """The importance-sampled policy gradient: ``L_t = -rho_t A_t`` (PPO without its clip; its
    gradient is REINFORCE's, reweighted to the behaviour policy's samples).

    Tinker's ``importance_sampling`` loss (its cookbook's REINFORCE); not offered to RL's
    ``loss:`` (``LOSSES``), where ``ppo_clip`` bounds the same ratio.
    """
    none = torch.zeros_like(mask, dtype=torch.bool)
    ratio = torch.exp(logprobs - old_logprobs)
    return TokenLoss(loss=-ratio * advantages, clipped_low=none, clipped_high=none)


def dro(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    beta: float = 0.05,
) -> TokenLoss:
    """Direct reward optimisation's regularised policy gradient, per token:
    ``L_t = -(A_t log pi(y_t) - beta / 2 (log pi(y_t) - log pi_old(y_t))^2)``.

    Richemond et al. 2024, "Offline Regularised Reinforcement Learning for Large Language Models
    Alignment", arXiv:2405.19107, in the per-token form of Tinker's ``dro`` loss; not offered to
    RL's ``loss:`` (``LOSSES``).
    """
    none = torch.zeros_like(mask, dtype=torch.bool)
    penalty = (logprobs - old_logprobs) ** 2
    return TokenLoss(
        loss=-(logprobs * advantages - 0.5 * beta * penalty), clipped_low=none, clipped_high=none
    )


LossFn = Callable[..., TokenLoss]

LOSSES: Registry[LossFn] = Registry("loss", plural="losses")
for _name, _fn in (
    (LossName.PPO_CLIP, ppo_clip),
    (LossName.GSPO, gspo),
    (LossName.CISPO, cispo),
    (LossName.REINFORCE, reinforce),
):
    LOSSES.add(_name, _fn)


def aggregate(
    per_token: Tensor,
    mask: Tensor,
    aggregation: str = Aggregation.TOKEN_MEAN,
    *,
    max_length: int | None = None,
    total_tokens: float | None = None,
    total_sequences: float | None = None,
) -> Tensor:
    """Reduce a ``[B, T]`` per-token loss to a scalar over the masked tokens.

    - ``token-mean``: ``sum_{i,t} m L / sum_{i,t} m`` (DAPO's token-level loss).
    - ``seq-mean-token-mean``: ``1/N sum_i (sum_t m L / sum_t m)`` over the ``N`` sequences
      with at least one masked token (GRPO's original sample-level loss).
    - ``seq-mean-token-sum-norm``: ``1/B sum_i (sum_t m L) / max_length`` with a constant
      ``max_length`` (Dr. GRPO, arXiv:2503.20783): no per-sequence length normalisation.

    With gradient accumulation pass ``total_tokens`` (token-mean) or ``total_sequences`` (the
    two sequence modes), counted over the whole optimiser batch, so micro-batches add up to the
    loss of the full batch.
    """
    m = mask.bool()
    x = torch.where(m, per_token, torch.zeros_like(per_token))
    if aggregation == Aggregation.TOKEN_MEAN:
        denom = m.sum().clamp(min=1) if total_tokens is None else total_tokens
        return x.sum() / denom
    if aggregation == Aggregation.SEQ_MEAN_TOKEN_MEAN:
        per_seq = x.sum(dim=-1) / m.sum(dim=-1).clamp(min=1)
        n = m.any(dim=-1).sum().clamp(min=1) if total_sequences is None else total_sequences
        return per_seq.sum() / n
    if aggregation == Aggregation.SEQ_MEAN_TOKEN_SUM_NORM:
        if max_length is None or max_length <= 0:
            raise ConfigError(
                "max_length: aggregation 'seq-mean-token-sum-norm' needs a positive constant "
                f"max_length (the generation budget), got {max_length!r}"
            )
        n = per_token.shape[0] if total_sequences is None else total_sequences
        return x.sum() / (max_length * n)
    known = ", ".join(Aggregation)
    raise ConfigError(f"aggregation: unknown {aggregation!r}; choose one of {known}")


def loss_options(name: str) -> list[str]:
    """The keyword options the loss called ``name`` accepts."""
    return keyword_options(LOSSES.get(name))


def policy_loss(
    name: str,
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    aggregation: str = Aggregation.TOKEN_MEAN,
    max_length: int | None = None,
    total_tokens: float | None = None,
    total_sequences: float | None = None,
    logits: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    kl_coef: float = 0.0,
    kl_kind: str = "k3",
    **kwargs: float | None,
) -> tuple[Tensor, dict[str, float]]:
    """The loss ``name`` (a name in ``LOSSES``), aggregated, with its metrics.

    Args:
        name: ``ppo_clip``, ``gspo``, ``cispo`` or ``reinforce``.
        logprobs, old_logprobs, advantages, mask: ``[B, T]`` (see the module docstring).
        aggregation: ``token-mean``, ``seq-mean-token-mean`` or ``seq-mean-token-sum-norm``.
        max_length, total_tokens, total_sequences: see ``aggregate``.
        logits: optional ``[B, T, V]`` logits that produced ``logprobs``, for the entropy metric.
        ref_logprobs: optional ``[B, T]`` reference-policy logprobs; with ``kl_coef != 0`` the
            term ``kl_coef * kl_estimate(kl_kind, logprobs, ref_logprobs)`` is added to each
            token's loss before aggregation (GRPO's KL loss). Its mean is reported either way.
        **kwargs: options of the loss itself (``eps_low``, ``eps_high``).

    Returns:
        The scalar loss and metrics: ``loss``, ``clip_frac_low``, ``clip_frac_high``,
        ``clip_frac``, ``approx_kl`` (k3 estimate of ``KL(pi_old || pi)``), ``adv_mean``,
        ``adv_std``, ``loss_tokens``, and ``entropy`` / ``kl_ref`` when their inputs are given.
    """
    fn = LOSSES.get(name)
    refuse_unknown_options(f"loss {name!r}", fn, kwargs)
    shape = tuple(logprobs.shape)
    for label, t in (("old_logprobs", old_logprobs), ("advantages", advantages), ("mask", mask)):
        if tuple(t.shape) != shape or len(shape) != 2:
            raise ConfigError(
                f"{label}: shape {list(t.shape)} does not match logprobs {list(shape)}"
            )

    m = mask.bool()
    zero = torch.zeros_like(logprobs)
    # Sanitise first so that nothing off the mask can reach the loss or its gradient.
    lp = torch.where(m, logprobs, zero)
    old = torch.where(m, old_logprobs.detach().to(lp.dtype), zero)
    adv = torch.where(m, advantages.detach().to(lp.dtype), zero)
    token_loss = fn(lp, old, adv, m, **kwargs)
    per_token = token_loss.loss

    metrics: dict[str, float] = {}
    if ref_logprobs is not None:
        if tuple(ref_logprobs.shape) != shape:
            raise ConfigError(
                f"ref_logprobs: shape {list(ref_logprobs.shape)} does not match logprobs "
                f"{list(shape)}"
            )
        ref = torch.where(m, ref_logprobs.detach().to(lp.dtype), zero)
        kl = kl_estimate(kl_kind, lp, ref)
        if kl_coef != 0.0:
            per_token = per_token + kl_coef * kl
        metrics["kl_ref"] = float(masked_mean(kl.detach(), m))

    loss = aggregate(
        per_token,
        m,
        aggregation,
        max_length=max_length,
        total_tokens=total_tokens,
        total_sequences=total_sequences,
    )

    with torch.no_grad():
        low = masked_mean(token_loss.clipped_low.to(lp.dtype), m)
        high = masked_mean(token_loss.clipped_high.to(lp.dtype), m)
        log_ratio = (lp - old).detach()
        metrics.update(
            {
                "loss": float(loss.detach()),
                "clip_frac_low": float(low),
                "clip_frac_high": float(high),
                "clip_frac": float(low + high),
                "approx_kl": float(masked_mean(torch.exp(log_ratio) - 1.0 - log_ratio, m)),
                "adv_mean": float(masked_mean(adv, m)),
                "adv_std": float(masked_std(adv, m)),
                "loss_tokens": float(m.sum()),
            }
        )
        if logits is not None:
            if tuple(logits.shape[:2]) != shape:
                raise ConfigError(
                    f"logits: shape {list(logits.shape)} does not start with logprobs' {list(shape)}"
                )
            metrics["entropy"] = float(masked_mean(entropy_from_logits(logits.detach()), m))
    return loss, metrics
