"""Reuse of a finished sequence's keys and values when a later prompt continues it.

A multi-turn episode sends its whole history at every turn: the previous prompt, the reply and
the new observation. Without reuse every turn re-prefills the history (for SmolLM2 over 3 turns
in ``bench/multiturn_generation.py``, reuse cuts prefilled tokens by 65%). When a sequence
finishes, the engine keeps its keys and values here, keyed by its tokens; a new prompt that
starts with those tokens prefills only the rest (the idea of vLLM's automatic prefix caching,
per sequence instead of per block).

Only whole-entry prefixes are reused. Partial overlaps (the shared prompt of a group's samples)
would make what a sequence computes depend on which other sequence happened to finish first.
Entries are evicted least recently used first beyond ``capacity_bytes``, and the cache must be
cleared whenever the weights change.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass
class PrefixEntry:
    """The keys and values (per layer, ``[H, T, D]``) of the ``T`` tokens in ``tokens``."""

    tokens: list[int]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


class PrefixCache:
    """Finished sequences' states, looked up by the longest one that prefixes a prompt."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self._entries: OrderedDict[tuple[int, ...], PrefixEntry] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def lookup(self, prompt: list[int]) -> PrefixEntry | None:
        """The longest entry that is a proper prefix of ``prompt`` (at least one prompt token
        is left to compute the next token's logits from), or None."""
        best: PrefixEntry | None = None
        for entry in self._entries.values():
            n = len(entry.tokens)
            if (
                n < len(prompt)
                and (best is None or n > len(best.tokens))
                and (prompt[:n] == entry.tokens)
            ):
                best = entry
        if best is not None:
            self._entries.move_to_end(tuple(best.tokens))
            self.hits += 1
            self.reused_tokens += len(best.tokens)
        return best

    def store(self, entry: PrefixEntry) -> None:
        """Keep ``entry``; entries it extends are dropped (it serves their prompts too)."""
        if not entry.tokens or entry.nbytes > self.capacity_bytes:
            return
        key = tuple(entry.tokens)
        for old_key in [k for k in self._entries if len(k) <= len(key) and key[: len(k)] == k]:
            self._drop(old_key)
        self._entries[key] = entry
        self._bytes += entry.nbytes
        while self._bytes > self.capacity_bytes:
            self._drop(next(iter(self._entries)))

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def _drop(self, key: tuple[int, ...]) -> None:
        self._bytes -= self._entries.pop(key).nbytes
