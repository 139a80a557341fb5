"""The lean Llama forward (decode steps and prefills) computes what transformers computes."""

from __future__ import annotations

import copy

import pytest
import torch

from trajforge.policy.engine.kv_cache import RowCache
from trajforge.policy.engine.llama_decode import (
    ForwardGroup,
    causal_mask,
    lean_forward,
    rotary_table,
    supports_lean_decode,
)
from trajforge.policy.models.tiny import tiny_model_and_tokenizer


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
        model(input_ids=ids, attention_mask=mask, position_ids=positions,
              past_key_values=caches[0].cache, use_cache=True)  # fmt: skip
        lean_forward(model, [ForwardGroup(ids, causal_mask(mask, 9), positions, caches[1])])
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
        (lean,) = lean_forward(
            model,
            [ForwardGroup(step_ids, step_mask.bool()[:, None, None, :], step_positions, caches[1])],
        )
    tolerance = 1e-5 if dtype is torch.float32 else 2e-2
    assert torch.allclose(lean, reference, atol=tolerance, rtol=tolerance)
    assert torch.equal(lean.argmax(-1), reference.argmax(-1))
    unpadded = step_mask.bool()
    for mine, theirs in zip(caches[1].layers, caches[0].layers, strict=True):
        assert mine.length == theirs.length == 10
        for row in range(3):
            assert torch.allclose(
                mine.keys[row][:, unpadded[row]].float(),
                theirs.keys[row][:, unpadded[row]].float(),
                atol=tolerance,
            )
        # On a CPU the lean forward attends in fp32 whatever the weights (bf16 SDPA is slow there).
        assert mine.keys.dtype is torch.float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lean_prefill_matches_the_transformers_forward(dtype: torch.dtype) -> None:
    """A left-padded prefill on top of a cached history, as the engine runs one when a prompt
    reuses a finished turn: same logits and same cache contents as transformers."""
    model, _ = tiny_model_and_tokenizer(seed=4)
    model = model.to(dtype)
    layers = model.config.num_hidden_layers
    torch.manual_seed(1)
    history = torch.randint(0, 1000, (3, 6))
    history_mask = torch.ones((3, 6), dtype=torch.long)
    history_mask[1, :6] = 0  # a row with no history
    history_mask[2, :2] = 0
    new_ids = torch.randint(0, 1000, (3, 5))
    new_mask = torch.ones((3, 5), dtype=torch.long)
    new_mask[0, :3] = 0  # a shorter new suffix, left-padded
    mask = torch.cat([history_mask, new_mask], -1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        caches = [RowCache(layers), RowCache(layers)]
        model(input_ids=history, attention_mask=history_mask, position_ids=positions[:, :6],
              past_key_values=caches[0].cache, use_cache=True)  # fmt: skip
        history_group = ForwardGroup(
            history, causal_mask(history_mask, 6), positions[:, :6], caches[1]
        )
        lean_forward(model, [history_group])
        reference = (
            model(
                input_ids=new_ids,
                attention_mask=mask,
                position_ids=positions[:, 6:],
                past_key_values=caches[0].cache,
                use_cache=True,
            )
            .logits[:, -1]
            .float()
        )
        (lean,) = lean_forward(
            model, [ForwardGroup(new_ids, causal_mask(mask, 5), positions[:, 6:], caches[1])]
        )
    tolerance = 1e-5 if dtype is torch.float32 else 2e-2
    assert torch.isfinite(lean).all()
    assert torch.allclose(lean, reference, atol=tolerance, rtol=tolerance)
    assert torch.equal(lean.argmax(-1), reference.argmax(-1))
    unpadded = mask.bool()
    for mine, theirs in zip(caches[1].layers, caches[0].layers, strict=True):
        assert mine.length == theirs.length == 11
        for row in range(3):
            assert torch.allclose(
                mine.keys[row][:, unpadded[row]].float(),
                theirs.keys[row][:, unpadded[row]].float(),
                atol=tolerance,
            )
            assert torch.allclose(
                mine.values[row][:, unpadded[row]].float(),
                theirs.values[row][:, unpadded[row]].float(),
                atol=tolerance,
            )


def test_causal_mask_sees_unpadded_columns_up_to_each_query() -> None:
    mask = torch.tensor([[0, 1, 1, 0, 1], [1, 1, 1, 1, 1]])
    allowed = causal_mask(mask, 2)
    assert allowed.shape == (2, 1, 2, 5)
    assert allowed[0, 0].tolist() == [
        [False, True, True, True, False],  # a padding query sees only itself
        [False, True, True, False, True],
    ]
    assert allowed[1, 0].tolist() == [[True, True, True, True, False], [True] * 5]


def test_other_models_keep_the_transformers_forward() -> None:
    from peft import LoraConfig, get_peft_model

    model, _ = tiny_model_and_tokenizer(seed=3)
    wrapped = get_peft_model(copy.deepcopy(model), LoraConfig(r=2, target_modules=["q_proj"]))
    assert not supports_lean_decode(wrapped)
    biased = copy.deepcopy(model)
    biased.config.attention_bias = True
    assert not supports_lean_decode(biased)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_table_gives_what_the_embedding_computes(dtype: torch.dtype) -> None:
    model, _ = tiny_model_and_tokenizer(seed=3)
    rotary = model.model.rotary_emb
    positions = torch.tensor([[0, 5, 4095], [17, 18, 19]])
    table = rotary_table(rotary, 4096, dtype)
    cos, sin = rotary(torch.empty(0, dtype=dtype), positions)
    assert torch.equal(table.cos[positions], cos)
    assert torch.equal(table.sin[positions], sin)
    assert rotary_table(rotary, 10, dtype) is table
    assert rotary_table(rotary, 5000, dtype).cos.shape[0] >= 5000
    with torch.no_grad():
        rotary.inv_freq.mul_(0.5)  # changed in place: the table follows
    halved = rotary_table(rotary, 10, dtype)
    assert torch.equal(halved.cos[positions], rotary(torch.empty(0, dtype=dtype), positions)[0])
