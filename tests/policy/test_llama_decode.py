"""The lean Llama decode step computes what the transformers forward computes."""

from __future__ import annotations

import copy

import pytest
import torch

from trajforge.policy.kv_cache import RowCache
from trajforge.policy.llama_decode import lean_decode_step, supports_lean_decode
from trajforge.policy.tiny import tiny_model_and_tokenizer


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lean_step_matches_the_transformers_forward(dtype: torch.dtype) -> None:
    model, _ = tiny_model_and_tokenizer(seed=3)
    model = model.to(dtype)
    assert supports_lean_decode(model)
    layers = model.config.num_hidden_layers
    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (3, 9))
    mask = torch.ones((3, 9), dtype=torch.long)
    mask[0, :4] = 0  # a left-padded row
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        caches = [RowCache(layers), RowCache(layers)]
        for cache in caches:
            model(input_ids=ids, attention_mask=mask, position_ids=positions,
                  past_key_values=cache.cache, use_cache=True)  # fmt: skip
        step_ids = torch.randint(0, 1000, (3, 1))
        step_mask = torch.cat([mask, torch.ones((3, 1), dtype=torch.long)], -1)
        step_positions = positions[:, -1:] + 1
        reference = (
            model(
                input_ids=step_ids,
                attention_mask=step_mask,
                position_ids=step_positions,
                past_key_values=caches[0].cache,
                use_cache=True,
            )
            .logits[:, -1]
            .float()
        )
        lean = lean_decode_step(
            model, step_ids, step_mask.bool()[:, None, None, :], step_positions, caches[1]
        )
    tolerance = 1e-5 if dtype is torch.float32 else 2e-2
    assert torch.allclose(lean, reference, atol=tolerance, rtol=tolerance)
    assert torch.equal(lean.argmax(-1), reference.argmax(-1))
    for mine, theirs in zip(caches[1].layers, caches[0].layers, strict=True):
        assert mine.length == theirs.length == 10
        assert torch.allclose(mine.keys.float(), theirs.keys.float(), atol=tolerance)


def test_other_models_keep_the_transformers_forward() -> None:
    from peft import LoraConfig, get_peft_model

    model, _ = tiny_model_and_tokenizer(seed=3)
    wrapped = get_peft_model(copy.deepcopy(model), LoraConfig(r=2, target_modules=["q_proj"]))
    assert not supports_lean_decode(wrapped)
    biased = copy.deepcopy(model)
    biased.config.attention_bias = True
    assert not supports_lean_decode(biased)
