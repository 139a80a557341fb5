"""The decode mask: one column per step, bool and additive forms always in agreement."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trajforge.policy.engine.decode_mask import GROWTH, DecodeMask


def expected_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    zeros = torch.zeros(mask.shape, dtype=dtype)
    return zeros.masked_fill(~mask, float("-inf"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_columns_appended_past_the_spare_room_keep_both_forms_in_step(dtype: torch.dtype) -> None:
    start = torch.tensor([[0, 0, 1, 1, 0, 1], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1]])
    mask = DecodeMask(start, dtype)
    steps = 2 * GROWTH + 3  # grows the buffers twice
    for _ in range(steps):
        mask.append_column()
    want = torch.cat([start.bool(), torch.ones((3, steps), dtype=torch.bool)], dim=-1)
    assert mask.width == 6 + steps and mask.dtype == dtype
    assert torch.equal(mask.mask, want)
    bias = mask.attention_bias()
    assert bias.shape == (3, 1, 1, 6 + steps) and bias.dtype == dtype
    assert torch.equal(bias[:, 0, 0], expected_bias(want, dtype))


def test_attention_with_the_additive_form_equals_attention_with_the_bool_mask() -> None:
    generator = torch.Generator().manual_seed(0)
    mask = DecodeMask(torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]), torch.float32)
    mask.append_column()
    q = torch.randn((2, 4, 1, 8), generator=generator)
    k = torch.randn((2, 2, mask.width, 8), generator=generator)
    v = torch.randn((2, 2, mask.width, 8), generator=generator)
    with_bias = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask.attention_bias(), enable_gqa=True
    )
    with_bool = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask.mask[:, None, None, :], enable_gqa=True
    )
    assert torch.equal(with_bias, with_bool)
