"""Masked reductions and the entropy of a policy's next-token distribution."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch import Tensor


def masked_sum(values: Tensor, mask: Tensor) -> Tensor:
    """Sum of ``values`` where ``mask`` is set; masked entries may hold inf or nan."""
    return torch.where(mask.bool(), values, torch.zeros_like(values)).sum()


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` where ``mask`` is set, 0 when nothing is."""
    count = mask.bool().sum()
    return masked_sum(values, mask) / count.clamp(min=1)


def masked_std(values: Tensor, mask: Tensor) -> Tensor:
    """Population standard deviation of ``values`` where ``mask`` is set, 0 when nothing is."""
    mean = masked_mean(values, mask)
    return masked_mean((values - mean) ** 2, mask).sqrt()


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Per-position entropy ``H = logsumexp(z) - sum_v softmax(z)_v z_v`` of ``[..., V]`` logits."""
    z = logits.float()
    log_z = torch.logsumexp(z, dim=-1)
    return log_z - (torch.softmax(z, dim=-1) * z).sum(dim=-1)
