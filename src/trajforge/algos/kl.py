"""Per-token KL estimators against a reference policy, as a loss term or a reward penalty.

Tokens are sampled from the current policy ``pi``; with ``log r = log pi_ref(y_t) - log pi(y_t)``
the three estimators of ``KL(pi || pi_ref)`` from Schulman's note "Approximating KL
Divergence" (2020, http://joschu.net/blog/kl-approx.html) are:

- ``k1 = -log r``: unbiased, high variance, can be negative per token;
- ``k2 = (log r)^2 / 2``: biased, low variance, always >= 0;
- ``k3 = (r - 1) - log r``: unbiased, low variance, always >= 0 (GRPO's KL term,
  arXiv:2402.03300 eq. 4).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from trajforge.algos.names import KLKind
from trajforge.errors import ConfigError

if TYPE_CHECKING:
    from torch import Tensor


def kl_estimate(kind: str, logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token estimate of ``KL(pi || pi_ref)`` of kind ``k1``, ``k2`` or ``k3``.

    Args:
        kind: which estimator (see the module docstring).
        logprobs: ``[B, T]`` log-probabilities of the sampled tokens under the current policy.
        ref_logprobs: ``[B, T]`` the same tokens' log-probabilities under the reference policy.

    Returns:
        ``[B, T]`` estimates; gradients flow through ``logprobs``.
    """
    if logprobs.shape != ref_logprobs.shape:
        raise ConfigError(
            f"kl: logprobs {list(logprobs.shape)} and ref_logprobs "
            f"{list(ref_logprobs.shape)} differ in shape"
        )
    log_r = ref_logprobs - logprobs
    if kind == KLKind.K1:
        return -log_r
    if kind == KLKind.K2:
        return 0.5 * log_r**2
    if kind == KLKind.K3:
        return torch.exp(log_r) - 1.0 - log_r
    known = ", ".join(KLKind)
    raise ConfigError(f"kl_kind: unknown {kind!r}; choose one of {known}")


def apply_kl_penalty(values: Tensor, kl: Tensor, coef: float, mask: Tensor | None = None) -> Tensor:
    """KL as a reward penalty: ``values - coef * kl`` (only where ``mask`` is set, if given).

    ``values`` are per-token rewards (REINFORCE++/PPO style, before computing returns) or
    advantages; ``kl`` comes from ``kl_estimate``, usually detached for a penalty.
    """
    penalty = coef * kl
    if mask is not None:
        penalty = torch.where(mask.bool(), penalty, torch.zeros_like(penalty))
    return values - penalty
