"""Shared prefixes: prompts admitted together prefill what they begin with once, and generate
what each would alone."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

from trajforge.policy.base import SamplingParams
from trajforge.policy.engine.generation_request import GenerationRequest
from trajforge.policy.engine.hf_engine import DecodeEngine
from trajforge.policy.engine.prefix_cache import MAX_SHARED, PrefixCache, PrefixEntry
from trajforge.policy.engine.sampling import UniformStream
from trajforge.policy.engine.shared_prefix import MIN_SHARED, shared_parts
from trajforge.policy.hf import HFPolicy
from trajforge.policy.models.tiny import tiny_model_and_tokenizer

SYSTEM = list(range(10, 10 + MIN_SHARED + 4))
TASK_A = list(range(100, 100 + MIN_SHARED))
TASK_B = list(range(200, 200 + MIN_SHARED))


def test_the_tree_of_shared_parts_has_a_level_per_common_beginning() -> None:
    prompts = [
        SYSTEM + TASK_A + [1, 2],
        SYSTEM + TASK_A + [1, 2],
        SYSTEM + TASK_B + [3],
        SYSTEM + TASK_B + [4, 5],
        [7] * 40,  # shares nothing with the others
    ]
    levels = shared_parts(prompts)
    assert [[p.tokens for p in level] for level in levels] == [
        [SYSTEM],
        # Identical prompts share all but their last token, whose logits start the reply.
        [SYSTEM + TASK_A + [1], SYSTEM + TASK_B],
    ]
    assert [p.members for p in levels[1]] == [[0, 1], [2, 3]]
    assert levels[1][0].parent is levels[0][0]


def test_beginnings_shorter_than_the_minimum_are_not_shared() -> None:
    short = list(range(MIN_SHARED - 1))
    assert shared_parts([[*short, 1, 2], [*short, 3, 4]]) == []
    assert shared_parts([[*SYSTEM, 1]]) == []


def test_a_chain_of_beginnings_deeper_than_the_recursion_limit_is_one_level_each() -> None:
    # Prompt k shares k + 1 of its ones with every longer prompt: each subset's common
    # beginning is one token longer than its parent's.
    count = 1100
    prompts = [[*SYSTEM, *([1] * k), 2, 3] for k in range(count)]
    levels = shared_parts(prompts)
    assert len(levels) == count - 1
    assert all(len(level) == 1 for level in levels)
    assert [len(level[0].tokens) for level in levels[:3]] == [len(SYSTEM) + k for k in range(3)]
    assert all(b[0].parent is a[0] for a, b in itertools.pairwise(levels))


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    return tiny_model_and_tokenizer(seed=0)


def _generate(engine: DecodeEngine, prompts: list[list[int]]) -> list[GenerationRequest]:
    """``prompts`` admitted together, every other one sampled, to the end."""
    device = torch.device("cpu")
    requests = [
        GenerationRequest(
            prompt,
            SamplingParams(temperature=float(i % 2), max_new_tokens=8, seed=i),
            8,
            UniformStream.seeded(i, device),
            lambda _: None,
        )
        for i, prompt in enumerate(prompts)
    ]
    with torch.inference_mode():
        engine.add(requests)
        while engine.rows:
            engine.step()
    return requests


@pytest.mark.parametrize("lean", [True, False])
def test_shared_prefixes_generate_what_whole_prefills_do(tiny: tuple[Any, Any], lean: bool) -> None:
    model, tok = tiny
    prompts = [
        SYSTEM + TASK_A + [5],
        SYSTEM + TASK_A + [5],
        SYSTEM + TASK_A + [6, 7],
        SYSTEM + TASK_B + [8],
        [*SYSTEM, 9, 9, 9],
    ]
    shared = DecodeEngine(model, tok, [], lean_decode=lean)
    whole = DecodeEngine(model, tok, [], lean_decode=lean, share_prefixes=False)
    with_sharing = _generate(shared, prompts)
    without = _generate(whole, prompts)
    assert [r.token_ids for r in with_sharing] == [r.token_ids for r in without]
    for a, b in zip(with_sharing, without, strict=True):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    # SYSTEM once, then TASK_A over it (the last token of each prompt is its own); every
    # prompt prefills only the rest: TASK_B + [8] for the one task no other prompt shares.
    once = len(SYSTEM) + len(TASK_A)
    own = 1 + 1 + 2 + len(TASK_B) + 1 + 3
    assert shared.stats.shared_prefill_tokens == once
    assert shared.stats.prefill_tokens == once + own
    assert whole.stats.prefill_tokens == sum(len(p) for p in prompts)
    assert whole.stats.shared_prefill_tokens == 0


def test_a_policy_can_prefill_every_prompt_whole(tiny: tuple[Any, Any]) -> None:
    model, tok = tiny
    assert HFPolicy(model, tok)._engine.share_prefixes
    assert not HFPolicy(model, tok, share_prefixes=False)._engine.share_prefixes


def test_a_prompt_admitted_later_starts_from_what_an_earlier_batch_shared(
    tiny: tuple[Any, Any],
) -> None:
    model, tok = tiny
    cache = PrefixCache(2**30)
    kept = DecodeEngine(model, tok, [], prefix_cache=cache)
    whole = DecodeEngine(model, tok, [], share_prefixes=False)
    first = [SYSTEM + TASK_A + [5], SYSTEM + TASK_A + [6, 7]]
    _generate(kept, first)
    assert kept.stats.shared_prefill_tokens == len(SYSTEM) + len(TASK_A)
    prefilled = kept.stats.prefill_tokens
    # Alone, a prompt of another task reuses the system prompt (a beginning of the kept part);
    # two of a third task share their task over it.
    later = [SYSTEM + TASK_B + [8]]
    together = [SYSTEM + TASK_B + [1, 2, 3], SYSTEM + TASK_B + [4]]
    for prompts in (later, together):
        with_kept = _generate(kept, prompts)
        without = _generate(whole, prompts)
        assert [r.token_ids for r in with_kept] == [r.token_ids for r in without]
        for a, b in zip(with_kept, without, strict=True):
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    assert kept.stats.prefill_tokens - prefilled == (len(TASK_B) + 1) + len(TASK_B) + 3 + 1
    # New weights make every kept part stale.
    cache.clear()
    assert cache.shared_base(later[0], 0, MIN_SHARED) is None


def test_a_kept_part_serves_only_its_adapter_and_a_long_enough_beginning() -> None:
    cache = PrefixCache(2**30)
    keys = [torch.arange(2 * 40 * 3, dtype=torch.float32).reshape(2, 40, 3)]
    tokens = SYSTEM + TASK_A
    cache.remember_shared(PrefixEntry(tokens, keys, [k + 1 for k in keys], adapter_key=7))
    assert cache.shared_base(SYSTEM + TASK_B, 0, MIN_SHARED) is None
    head = cache.shared_base(SYSTEM + TASK_B, 7, MIN_SHARED)
    assert head is not None and head.tokens == SYSTEM
    assert torch.equal(head.keys[0], keys[0][:, : len(SYSTEM)])
    # A prompt keeps its last token to sample from, and too short a beginning is no use.
    assert cache.shared_base(tokens, 7, MIN_SHARED).tokens == tokens[:-1]  # type: ignore[union-attr]
    assert cache.shared_base([*SYSTEM[: MIN_SHARED - 1], 0, 0], 7, MIN_SHARED) is None
    for i in range(MAX_SHARED):
        cache.remember_shared(PrefixEntry([i] * 20, keys, keys))
    assert cache.shared_base(SYSTEM + TASK_B, 7, MIN_SHARED) is None
    off = PrefixCache(2**30, max_shared=0)
    off.remember_shared(PrefixEntry(tokens, keys, keys))
    assert off.shared_base(SYSTEM + TASK_B, 0, MIN_SHARED) is None
