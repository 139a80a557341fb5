"""The lean forward's fused, packed weights follow the model's weights as they change."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from trajforge.policy.base import SamplingParams
from trajforge.policy.engine.decode_weights import decode_weights, forget_decode_weights
from trajforge.policy.engine.kv_cache import RowCache
from trajforge.policy.engine.llama_decode import ForwardGroup, causal_mask, lean_forward
from trajforge.policy.hf import HFPolicy
from trajforge.policy.models.tiny import tiny_model_and_tokenizer


def _logits(model: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token logits of a fixed batch: the lean forward's and transformers'."""
    ids = torch.tensor([[5, 17, 40, 2, 9], [0, 0, 33, 8, 71]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        group = ForwardGroup(
            ids, causal_mask(mask, 5), positions, RowCache(model.config.num_hidden_layers)
        )
        (lean,) = lean_forward(model, [group])
        reference = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    return lean, reference[:, -1].float()


def _assert_current(model: Any) -> None:
    lean, reference = _logits(model)
    assert torch.allclose(lean, reference, atol=1e-5, rtol=1e-5)


def _perturb(model: Any) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    return {
        name: value + 0.05 * torch.randn(value.shape, generator=generator)
        for name, value in model.state_dict().items()
    }


def test_fused_weights_are_built_once_and_match_the_model() -> None:
    model, _ = tiny_model_and_tokenizer(seed=4)
    _assert_current(model)
    assert decode_weights(model) is decode_weights(model)
    assert len(decode_weights(model).layers) == model.config.num_hidden_layers


def test_in_place_updates_and_replaced_weights_are_followed() -> None:
    model, _ = tiny_model_and_tokenizer(seed=4)
    built = decode_weights(model)
    model.load_state_dict(_perturb(model))  # copies in place: the version counters move
    _assert_current(model)
    assert decode_weights(model) is not built
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model(input_ids=torch.tensor([[3, 4, 5]])).logits.sum().backward()
    optimizer.step()
    _assert_current(model)
    mlp = model.model.layers[1].mlp
    mlp.up_proj.weight = torch.nn.Parameter(torch.randn_like(mlp.up_proj.weight))
    _assert_current(model)


def test_a_fused_optimizer_step_is_followed_once_forgotten() -> None:
    """AdamW(fused=True) writes without moving the version counters, hence the explicit
    ``forget_decode_weights`` that ``HFPolicy.set_weights`` makes."""
    model, _ = tiny_model_and_tokenizer(seed=4)
    decode_weights(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
    model(input_ids=torch.tensor([[3, 4, 5]])).logits.sum().backward()
    optimizer.step()
    forget_decode_weights(model)
    _assert_current(model)


@pytest.mark.parametrize("shared", [True, False])
def test_a_policy_samples_the_weights_it_was_given(shared: bool) -> None:
    """After ``set_weights`` (the RL refresh: the trained module itself, or a copy's state),
    greedy tokens are the new weights' own."""
    model, tokenizer = tiny_model_and_tokenizer(seed=4)
    policy = HFPolicy(model, tokenizer, eos_token_ids=[])
    sampling = SamplingParams(temperature=0.0, max_new_tokens=6)
    prompt = [5, 17, 40, 2, 9]
    asyncio.run(policy.generate(prompt, sampling))
    new_state = _perturb(model)
    if shared:
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
        model(input_ids=torch.tensor([prompt])).logits.sum().backward()
        optimizer.step()
        policy.set_weights(model)
    else:
        policy.set_weights(new_state)
    after = asyncio.run(policy.generate(prompt, sampling)).token_ids
    fresh, _ = tiny_model_and_tokenizer(seed=4)
    fresh.load_state_dict(model.state_dict())
    reference = asyncio.run(
        HFPolicy(fresh, tokenizer, eos_token_ids=[]).generate(prompt, sampling)
    ).token_ids
    assert after == reference
    _assert_current(model)
