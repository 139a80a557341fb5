"""The inputs of a prefill: prompts grouped by length, left-padded, over their reused history."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trajforge.policy.engine.generation_request import GenerationRequest
from trajforge.policy.engine.kv_cache import RowCache
from trajforge.policy.engine.llama_decode import ForwardGroup, causal_mask
from trajforge.policy.engine.prefix_cache import PrefixEntry
from trajforge.policy.engine.sampling import truncations

PREFILL_FILL = 0.8
"""Prompts are prefilled in groups of similar length: a prompt shorter than this fraction of
its group's longest starts a new group, so padding never wastes more than ~20% of a prefill."""


@dataclass
class Prefill:
    """A group of requests ready to prefill: forward inputs plus what joining the batch needs
    (the 2-D padding mask over history and new columns, sampling parameters)."""

    requests: list[GenerationRequest]
    forward: ForwardGroup
    mask: torch.Tensor
    temperatures: torch.Tensor
    cuts: torch.Tensor
    reused_tokens: int


def length_groups(requests: list[GenerationRequest]) -> list[list[GenerationRequest]]:
    """``requests`` in groups of similar suffix length, longest first."""
    groups: list[list[GenerationRequest]] = []
    for request in sorted(requests, key=lambda r: len(r.suffix), reverse=True):
        if groups and len(request.suffix) >= PREFILL_FILL * len(groups[-1][0].suffix):
            groups[-1].append(request)
        else:
            groups.append([request])
    return groups


def build_prefill(
    requests: list[GenerationRequest], num_layers: int, device: torch.device
) -> Prefill:
    """Left-padded suffixes of ``requests`` (whose ``prefix`` is already looked up), their
    causal mask and positions, over a cache holding the reused prefixes."""
    forward, mask = prefill_inputs([(r.prompt_ids, r.prefix) for r in requests], num_layers, device)
    if any(r.adapter is not None for r in requests):
        forward.adapters = [r.adapter for r in requests]
    reused = sum(len(r.prefix.tokens) for r in requests if r.prefix is not None)
    temperatures = torch.tensor(
        [r.sampling.temperature for r in requests], dtype=torch.float32, device=device
    )
    cuts = truncations([r.sampling for r in requests], device)
    return Prefill(requests, forward, mask, temperatures, cuts, reused)


def prefill_inputs(
    sequences: list[tuple[list[int], PrefixEntry | None]], num_layers: int, device: torch.device
) -> tuple[ForwardGroup, torch.Tensor]:
    """The forward inputs that prefill each sequence's tokens past its reused prefix (the
    entry's tokens begin the sequence's), left-padded, and the ``[B, L]`` padding mask over
    the prefixes' columns and the new ones."""
    suffixes = [tokens[len(prefix.tokens) if prefix else 0 :] for tokens, prefix in sequences]
    width = max(len(s) for s in suffixes)
    ids = torch.zeros((len(sequences), width), dtype=torch.long, device=device)
    mask = torch.zeros((len(sequences), width), dtype=torch.long, device=device)
    for i, suffix in enumerate(suffixes):
        ids[i, width - len(suffix) :] = torch.tensor(suffix, dtype=torch.long, device=device)
        mask[i, width - len(suffix) :] = 1
    cache, mask = _reused_history([prefix for _, prefix in sequences], mask, num_layers)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -width:]
    return ForwardGroup(ids, causal_mask(mask, width), positions, cache), mask


def _reused_history(
    prefixes: list[PrefixEntry | None], mask: torch.Tensor, num_layers: int
) -> tuple[RowCache, torch.Tensor]:
    """The cache the prefill starts from (reused prefixes, right-aligned) and the attention
    mask over those columns followed by ``mask``'s."""
    past = max((len(p.tokens) for p in prefixes if p is not None), default=0)
    if not past:
        return RowCache(num_layers), mask
    like = next(p for p in prefixes if p is not None).keys[0]
    cache = RowCache.from_rows(
        [(p.keys, p.values) if p is not None else None for p in prefixes], past, like
    )
    past_mask = mask.new_zeros((len(prefixes), past))
    for i, prefix in enumerate(prefixes):
        if prefix is not None:
            past_mask[i, past - len(prefix.tokens) :] = 1
    return cache, torch.cat([past_mask, mask], dim=-1)
