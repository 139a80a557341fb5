"""The live batch's padding mask, grown one column per decode step without copying.

Rows are left-padded (see ``kv_cache``): a row attends to the columns where its mask is set. A
decode step adds one column every row attends to. Re-concatenating the ``[B, L]`` mask for that,
then converting it to the additive form attention adds to its scores (which
``scaled_dot_product_attention`` does again in every layer for a bool mask), is a handful of
``O(B * L)`` ops per step; here both forms live in buffers with spare columns and a step writes
one column of each.
"""

from __future__ import annotations

import torch

GROWTH = 128
"""Spare columns allocated whenever the buffers run out of room."""


class DecodeMask:
    """``[B, L]`` padding mask of the live rows and its additive form (0 where a row attends,
    ``-inf`` where it does not) in ``dtype``, the attention's dtype."""

    def __init__(self, mask: torch.Tensor, dtype: torch.dtype) -> None:
        rows, width = mask.shape
        self.width = width
        self._attends = torch.zeros((rows, width + GROWTH), dtype=torch.bool, device=mask.device)
        self._attends[:, :width] = mask.bool()
        self._bias = torch.full(
            (rows, width + GROWTH), float("-inf"), dtype=dtype, device=mask.device
        )
        self._bias[:, :width].masked_fill_(self._attends[:, :width], 0.0)

    @property
    def mask(self) -> torch.Tensor:
        """``[B, L]`` bool, True where a row attends."""
        return self._attends[:, : self.width]

    @property
    def dtype(self) -> torch.dtype:
        return self._bias.dtype

    def attention_bias(self) -> torch.Tensor:
        """``[B, 1, 1, L]``: what a decoded token's attention adds to its scores."""
        return self._bias[:, None, None, : self.width]

    def append_column(self) -> None:
        """One more column, which every row attends to (the token being decoded)."""
        if self.width == self._attends.shape[-1]:
            self._grow()
        self._attends[:, self.width] = True
        self._bias[:, self.width] = 0.0
        self.width += 1

    def _grow(self) -> None:
        rows, capacity = self._attends.shape
        attends = self._attends.new_zeros((rows, capacity + GROWTH))
        bias = torch.full_like(attends, float("-inf"), dtype=self._bias.dtype)
        attends[:, :capacity] = self._attends
        bias[:, :capacity] = self._bias
        self._attends, self._bias = attends, bias


def pad_left(mask: torch.Tensor, width: int) -> torch.Tensor:
    """``mask`` with columns that attend nowhere added on the left, ``width`` columns wide."""
    missing = width - mask.shape[-1]
    if missing == 0:
        return mask
    return torch.cat([mask.new_zeros((mask.shape[0], missing)), mask], dim=-1)
