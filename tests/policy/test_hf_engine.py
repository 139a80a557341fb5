"""DecodeEngine: a decode step that also prefills newcomers computes what two passes compute."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from trajforge.policy.base import SamplingParams
from trajforge.policy.engine.generation_request import GenerationRequest
from trajforge.policy.engine.hf_engine import DecodeEngine
from trajforge.policy.engine.prefix_cache import PrefixCache
from trajforge.policy.engine.sampling import UniformStream
from trajforge.policy.models.tiny import tiny_model_and_tokenizer


def _request(prompt: list[int], seed: int, temperature: float) -> GenerationRequest:
    return GenerationRequest(
        prompt_ids=prompt,
        sampling=SamplingParams(temperature=temperature),
        max_new_tokens=40,
        uniforms=UniformStream.seeded(seed, torch.device("cpu")),
        deliver=lambda _: None,
    )


def _drive(engine: DecodeEngine, fused: bool, temperature: float) -> list[GenerationRequest]:
    """Two rows decode, then three newcomers of two lengths arrive (one continuing a finished
    sequence, so its prompt reuses cached states), then everyone decodes to the budget."""
    first = [_request(list(range(10, 30)), 1, temperature), _request([5, 6, 7], 2, temperature)]
    primer = _request(list(range(40, 52)), 3, temperature)
    primer.max_new_tokens = 4
    engine.advance([primer])
    while len(engine):
        engine.advance([])
    continued = primer.prompt_ids + primer.token_ids[:-1] + [99, 98]
    later = [
        _request(list(range(100, 131)), 4, temperature),
        _request([7, 8, 9, 10], 5, temperature),
        _request(continued, 6, temperature),
    ]
    engine.advance(first)
    for _ in range(3):
        engine.advance([])
    if fused:
        engine.advance(later)
    else:
        engine.add(later)
        engine.step()
    while len(engine):
        engine.advance([])
    return [*first, *later]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_fused_step_equals_a_prefill_then_a_step(temperature: float) -> None:
    model: Any
    model, tok = tiny_model_and_tokenizer(seed=5)
    runs = {}
    for fused in (True, False):
        engine = DecodeEngine(model, tok, [], PrefixCache(capacity_bytes=1 << 26))
        with torch.inference_mode():
            runs[fused] = _drive(engine, fused, temperature)
        stats = engine.stats
        assert stats.fused_prefills == (3 if fused else 0)  # suffixes of 31, 4 and 2 tokens
        assert stats.reused_tokens == 15  # the continued prompt's 12 + 3 cached tokens
    for fused, separate in zip(runs[True], runs[False], strict=True):
        assert fused.token_ids == separate.token_ids
        assert torch.allclose(
            torch.tensor(fused.logprobs), torch.tensor(separate.logprobs), atol=1e-5
        )
        assert len(fused.token_ids) == 40
