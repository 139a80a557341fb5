"""The inputs of a prefill: prompts grouped by length, left-padded, over their reused history."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trajforge.policy.engine.generation_request import GenerationRequest
from trajforge.policy.engine.kv_cache import RowCache
from trajforge.policy.engine.llama_decode import ForwardGroup, causal_mask

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
    top_ps: torch.Tensor
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
    width = max(len(r.suffix) for r in requests)
    ids = torch.zeros((len(requests), width), dtype=torch.long, device=device)
    mask = torch.zeros((len(requests), width), dtype=torch.long, device=device)
    for i, request in enumerate(requests):
        n = len(request.suffix)
        ids[i, width - n :] = torch.tensor(request.suffix, dtype=torch.long, device=device)
        mask[i, width - n :] = 1
    cache, mask, reused = _reused_history(requests, mask, num_layers)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -width:]
    forward = ForwardGroup(ids, causal_mask(mask, width), positions, cache)
    temperatures = torch.tensor(
        [r.sampling.temperature for r in requests], dtype=torch.float32, device=device
    )
    top_ps = torch.tensor([r.sampling.top_p for r in requests], dtype=torch.float32, device=device)
    return Prefill(requests, forward, mask, temperatures, top_ps, reused)


def _reused_history(
    requests: list[GenerationRequest], mask: torch.Tensor, num_layers: int
) -> tuple[RowCache, torch.Tensor, int]:
    """The cache the prefill starts from (reused prefixes, right-aligned), the attention mask
    over those columns followed by ``mask``'s, and the number of reused tokens."""
    prefixes = [r.prefix for r in requests]
    past = max((len(p.tokens) for p in prefixes if p is not None), default=0)
    if not past:
        return RowCache(num_layers), mask, 0
    like = next(p for p in prefixes if p is not None).keys[0]
    cache = RowCache.from_rows(
        [(p.keys, p.values) if p is not None else None for p in prefixes], past, like
    )
    past_mask = mask.new_zeros((len(requests), past))
    reused = 0
    for i, prefix in enumerate(prefixes):
        if prefix is not None:
            past_mask[i, past - len(prefix.tokens) :] = 1
            reused += len(prefix.tokens)
    return cache, torch.cat([past_mask, mask], dim=-1), reused
