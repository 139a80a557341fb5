"""Prompts admitted together that begin alike: their common beginning prefilled once.

An RL step sends every episode's first prompt at once, and those prompts share most of their
tokens: all of them the env's system prompt, the samples of a group the task as well (on the
calculator job, 226 and 263 of each prompt's ~330 tokens). Prefilled one by one they cost
``rows x prompt`` tokens of forward; here the shared parts are computed once and every prompt
prefills only what is its own, over the shared keys and values (Hydragen's and SGLang's
RadixAttention idea, at prefill time: Juravsky et al. 2024, "Hydragen: High-Throughput LLM
Inference with Shared Prefixes", arXiv:2402.05121).

The shared parts form a tree: the longest common prefix of a set of prompts is one part, and the
prompts that continue it alike (the same next token) form a subset whose own longer common
prefix is the next part down. Each part is prefilled over its parent's keys and values, a level
at a time, and each prompt then reuses the deepest part it starts with. A part must be at least
``MIN_SHARED`` tokens long and leave every prompt at least one token of its own (the one the
next token's logits come from). Prompts that continue a cached sequence (an episode's next turn)
are left to the prefix cache.

Prompts share only with prompts under the same LoRA adapter: the shared keys and values are
computed under it. The deepest parts are kept in the prefix cache (``remember_shared``), and a
prompt admitted later starts from as much of one as it begins with; prompts admitted together
that start from the same kept part share what follows it.

A prompt's keys come out of one pass or of two depending on what was admitted with it: equal up
to float rounding, the same kind of difference as prefilling it beside prompts of other lengths.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from trajforge.policy.engine.generation_request import GenerationRequest
from trajforge.policy.engine.llama_decode import ForwardGroup
from trajforge.policy.engine.prefill import prefill_inputs
from trajforge.policy.engine.prefix_cache import PrefixCache, PrefixEntry

MIN_SHARED = 16
"""Fewest tokens worth a forward pass of their own."""

Forward = Callable[[ForwardGroup, torch.Tensor], None]
"""Runs one ``ForwardGroup`` (with its ``[B, L]`` padding mask) through the model."""


@dataclass
class SharedPart:
    """One shared beginning: its tokens, the part it continues, and the prompts under it."""

    tokens: list[int]
    parent: SharedPart | None
    members: list[int]
    """Indices of the prompts that start with ``tokens``."""
    entry: PrefixEntry | None = None


def _common_length(prompts: Sequence[Sequence[int]], members: list[int], start: int) -> int:
    """The length of ``members``' longest common prefix, known to be at least ``start``."""
    first = prompts[members[0]]
    # A prompt's last token is never shared: its logits give the prompt's next token.
    limit = min(len(prompts[i]) for i in members) - 1
    n = start
    while n < limit and all(prompts[i][n] == first[n] for i in members[1:]):
        n += 1
    return n


def shared_parts(
    prompts: Sequence[Sequence[int]], base: PrefixEntry | None = None
) -> list[list[SharedPart]]:
    """The tree of ``prompts``' shared beginnings past ``base`` (which they all begin with), a
    list per level (shallowest first)."""
    levels: list[list[SharedPart]] = []
    everyone = list(range(len(prompts)))
    root = SharedPart(base.tokens, None, everyone, base) if base is not None else None
    # Breadth first: subsets of prompts, the nearest part above them, its level and how many
    # tokens they are known to share. A subset is always smaller than the one it came from.
    queue: deque[tuple[list[int], SharedPart | None, int, int]] = deque(
        [(everyone, root, 0, len(root.tokens) if root else 0)]
    )
    while queue:
        members, parent, depth, start = queue.popleft()
        if len(members) < 2:
            continue
        length = _common_length(prompts, members, start)
        part = parent
        if length >= MIN_SHARED and (parent is None or length > len(parent.tokens)):
            part = SharedPart(list(prompts[members[0]][:length]), parent, members)
            while len(levels) <= depth:
                levels.append([])
            levels[depth].append(part)
            depth += 1
        by_next: dict[int, list[int]] = {}
        for i in members:
            if len(prompts[i]) > length + 1:
                by_next.setdefault(prompts[i][length], []).append(i)
        queue.extend(
            (subset, part, depth, length + 1)
            for subset in by_next.values()
            if len(subset) < len(members)
        )
    return levels


def prefill_shared(
    prompts: Sequence[Sequence[int]],
    num_layers: int,
    device: torch.device,
    forward: Forward,
    base: PrefixEntry | None = None,
    adapter_key: int = 0,
) -> tuple[list[PrefixEntry | None], int]:
    """The keys and values each prompt can start from (None: nothing shared), and the tokens
    prefilled to make them.

    Args:
        prompts: the prompts admitted together (token ids).
        num_layers: the model's decoder layers.
        device: where the inputs go.
        forward: runs one ``ForwardGroup`` (with its ``[B, L]`` padding mask) through the
            model, filling its cache.
        base: keys and values every prompt begins with, computed before.
        adapter_key: the adapter ``forward`` runs under (``LoraAdapter.key``; 0: none).
    """
    deepest: list[PrefixEntry | None] = [base] * len(prompts)
    computed = 0
    for level in shared_parts(prompts, base):
        parts = [(part.tokens, part.parent.entry if part.parent else None, part) for part in level]
        group, mask = prefill_inputs(
            [(tokens, parent) for tokens, parent, _ in parts], num_layers, device
        )
        forward(group, mask)
        for row, (tokens, parent, part) in enumerate(parts):
            keys, values = group.cache.row_states(row, mask[row].bool())
            part.entry = PrefixEntry(tokens, keys, values, adapter_key)
            computed += len(tokens) - (len(parent.tokens) if parent else 0)
            for i in part.members:
                deepest[i] = part.entry
    return deepest, computed


def share_prefixes(
    requests: list[GenerationRequest],
    num_layers: int,
    device: torch.device,
    forward: Forward,
    kept: PrefixCache | None = None,
) -> int:
    """Point each request that continues no cached sequence at the deepest part it shares with
    the others under its adapter (``prefill_shared``), or with a part ``kept`` from earlier
    batches, where it keeps the new deepest parts; the tokens prefilled to make them."""
    groups: dict[
        tuple[int, tuple[int, ...]], tuple[PrefixEntry | None, list[GenerationRequest]]
    ] = {}
    for request in requests:
        if request.prefix is not None:
            continue
        base = (
            kept.shared_base(request.prompt_ids, request.adapter_key, MIN_SHARED)
            if kept is not None
            else None
        )
        key = (request.adapter_key, tuple(base.tokens) if base is not None else ())
        groups.setdefault(key, (base, []))[1].append(request)
    computed = 0
    for base, fresh in groups.values():
        if len(fresh) < 2:
            fresh[0].prefix = base
            continue
        entries, tokens = prefill_shared(
            [r.prompt_ids for r in fresh],
            num_layers,
            device,
            _under(fresh[0], forward),
            base,
            fresh[0].adapter_key,
        )
        for request, entry in zip(fresh, entries, strict=True):
            request.prefix = entry
        if kept is not None:
            for entry in {id(e): e for e in entries if e is not None and e is not base}.values():
                kept.remember_shared(entry)
        computed += tokens
    return computed


def _under(request: GenerationRequest, forward: Forward) -> Forward:
    """``forward`` with every row under ``request``'s adapter."""

    def run(group: ForwardGroup, mask: torch.Tensor) -> None:
        if request.adapter is not None:
            group.adapters = [request.adapter] * group.ids.shape[0]
        forward(group, mask)

    return run
