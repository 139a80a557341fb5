"""Prefix reuse: a prompt that continues a finished sequence prefills only its new tokens, and
generates exactly what a full prefill would."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
import torch

from trajforge.policy.base import Completion, SamplingParams
from trajforge.policy.engine import prefix_cache
from trajforge.policy.engine.prefix_cache import PrefixCache, PrefixEntry
from trajforge.policy.hf import HFPolicy
from trajforge.policy.models.tiny import tiny_model_and_tokenizer


def entry(tokens: list[int], nbytes_per_token: int = 4) -> PrefixEntry:
    state = torch.zeros((1, len(tokens), nbytes_per_token // 4))
    return PrefixEntry(tokens, [state], [state.clone()])


def test_lookup_takes_the_longest_proper_prefix() -> None:
    cache = PrefixCache(10**6)
    cache.store(entry([1, 2]))
    cache.store(entry([1, 2, 3, 4]))
    cache.store(entry([7, 8, 9]))
    found = cache.lookup([1, 2, 3, 4, 5])
    assert found is not None and found.tokens == [1, 2, 3, 4]
    # An entry equal to the whole prompt leaves no token to compute logits from.
    assert cache.lookup([7, 8, 9]) is None
    assert cache.lookup([1, 3]) is None
    assert (cache.hits, cache.reused_tokens) == (1, 4)


def test_an_entry_replaces_the_entries_it_extends() -> None:
    cache = PrefixCache(10**6)
    cache.store(entry([1, 2]))
    cache.store(entry([5]))
    cache.store(entry([1, 2, 3]))
    assert len(cache) == 2
    found = cache.lookup([1, 2, 9])
    assert found is None or found.tokens != [1, 2]


def test_least_recently_used_entries_are_evicted_beyond_capacity() -> None:
    one = entry([1, 1], nbytes_per_token=40).nbytes
    cache = PrefixCache(3 * one)
    for first in (1, 2, 3):
        cache.store(entry([first, first], nbytes_per_token=40))
    assert cache.lookup([1, 1, 0]) is not None  # 1 is now the most recently used
    cache.store(entry([4, 4], nbytes_per_token=40))
    assert len(cache) == 3 and cache.nbytes == 3 * one
    assert cache.lookup([2, 2, 0]) is None
    assert cache.lookup([1, 1, 0]) is not None
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0


def test_entries_beyond_the_entry_limit_are_evicted_until_more_requests_are_outstanding() -> None:
    cache = PrefixCache(10**9, min_entries=4)
    for first in range(6):
        cache.store(entry([first, 9]))
    assert len(cache) == 4
    assert cache.lookup([0, 9, 1]) is None and cache.lookup([5, 9, 1]) is not None
    cache.expect_outstanding(3)  # three conversations may each come back: room for six
    for first in range(6, 12):
        cache.store(entry([first, 9]))
    assert len(cache) == 6
    cache.expect_outstanding(1)  # the limit never shrinks under entries still useful
    assert cache.max_entries == 6


def test_discard_drops_the_entries_a_finished_conversation_starts_with() -> None:
    cache = PrefixCache(10**9)
    for tokens in ([1, 2], [1, 2, 3, 4], [7, 8], [1, 5]):
        cache.store(entry(tokens))
    cache.discard([1, 2, 3, 4, 9, 9])
    assert len(cache) == 2 and cache.lookup([1, 2, 3, 4, 5]) is None
    assert cache.lookup([7, 8, 0]) is not None and cache.lookup([1, 5, 0]) is not None
    cache.discard([6])  # nothing it starts with: nothing dropped
    assert len(cache) == 2


def test_a_policy_raises_the_entry_limit_with_the_requests_outstanding() -> None:
    model, tok = tiny_model_and_tokenizer(seed=0)
    policy = HFPolicy(model, tok, max_batch_size=4, prefix_cache_mb=16)
    assert policy.prefix_cache is not None
    policy.prefix_cache.max_entries = 2
    prompts = [[1 + i, 5, 6, 7] for i in range(12)]

    async def run() -> None:
        sampling = SamplingParams(max_new_tokens=3, temperature=1.0, seed=1)
        await asyncio.gather(*(policy.generate(p, sampling) for p in prompts))
        await policy.close()

    asyncio.run(run())
    # The 12 requests were outstanding together (4 decoding, 8 waiting): each keeps its entry.
    assert policy.prefix_cache.max_entries >= 12
    assert len(policy.prefix_cache) == 12


def brute_force_lookup(stored: list[list[int]], prompt: list[int]) -> list[int] | None:
    candidates = [t for t in stored if len(t) < len(prompt) and prompt[: len(t)] == t]
    return max(candidates, key=len, default=None)


@pytest.mark.parametrize("modulus", [None, 7])
def test_lookup_agrees_with_a_scan_of_every_entry(
    monkeypatch: pytest.MonkeyPatch, modulus: int | None
) -> None:
    """Many entries over a small alphabet (many shared prefixes); with a 7-valued hash nearly
    every lookup meets colliding entries, which must never be taken for a match."""
    if modulus is not None:
        monkeypatch.setattr(prefix_cache, "_HASH_MODULUS", modulus)
    rng = random.Random(0)
    cache = PrefixCache(10**9)
    stored: list[list[int]] = []
    for _ in range(300):
        tokens = [rng.randrange(3) for _ in range(rng.randrange(1, 12))]
        cache.store(entry(tokens))
        if modulus is None:
            kept = [t for t in stored if not (len(t) <= len(tokens) and tokens[: len(t)] == t)]
            stored = [*kept, tokens]
            assert len(cache) == len(stored)
        else:
            stored = [t.tokens for t in cache._entries.values()]
        prompt = [rng.randrange(3) for _ in range(rng.randrange(1, 14))]
        found = cache.lookup(prompt)
        expected = brute_force_lookup(stored, prompt)
        assert (found.tokens if found else None) == expected


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    return tiny_model_and_tokenizer(seed=0)


async def _two_turns(policy: HFPolicy, prompts: list[list[int]]) -> list[Completion]:
    """First turns together, then second turns that continue them with an observation."""
    sampling = SamplingParams(temperature=0.0, max_new_tokens=10)
    try:
        first = await asyncio.gather(*(policy.generate(p, sampling) for p in prompts))
        follow = [
            p + c.token_ids + [100 + i, 200 + i, 300]
            for i, (p, c) in enumerate(zip(prompts, first, strict=True))
        ]
        second = await asyncio.gather(*(policy.generate(p, sampling) for p in follow))
        return [*first, *second]
    finally:
        await policy.close()


def test_continued_prompts_reuse_states_and_generate_the_same(tiny: tuple[Any, Any]) -> None:
    model, tok = tiny
    prompts = [tok.encode(t) for t in ("Hi", "What is 2+2?", "x " * 30)]
    reused = HFPolicy(model, tok, max_batch_size=4, prefix_cache_mb=16)
    fresh = HFPolicy(model, tok, max_batch_size=4, prefix_cache_mb=0)
    with_reuse = asyncio.run(_two_turns(reused, prompts))
    without = asyncio.run(_two_turns(fresh, prompts))
    assert [c.token_ids for c in with_reuse] == [c.token_ids for c in without]
    for a, b in zip(with_reuse, without, strict=True):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    # Every second turn continued its first: the reused tokens are the first prompts plus all
    # but the last generated token, and only the rest was prefilled.
    expected = sum(len(p) + len(c.token_ids) - 1 for p, c in zip(prompts, with_reuse, strict=False))
    assert reused.stats.reused_tokens == expected
    assert reused.stats.prefill_tokens < fresh.stats.prefill_tokens
    assert fresh.stats.reused_tokens == 0


def test_new_weights_forget_reused_states(tiny: tuple[Any, Any]) -> None:
    model, tok = tiny
    policy = HFPolicy(model, tok, max_batch_size=4, prefix_cache_mb=16)
    asyncio.run(_two_turns(policy, [tok.encode("Hi")]))
    assert policy.prefix_cache is not None and len(policy.prefix_cache) > 0
    policy.set_weights(model)
    assert len(policy.prefix_cache) == 0
