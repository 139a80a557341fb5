"""Reuse of a finished sequence's keys and values when a later prompt continues it.

A multi-turn episode sends its whole history at every turn: the previous prompt, the reply and
the new observation. Without reuse every turn re-prefills the history (for SmolLM2 over 3 turns
in ``bench/multiturn_generation.py``, reuse cuts prefilled tokens by 65%). When a sequence
finishes, the engine keeps its keys and values here, keyed by its tokens; a new prompt that
starts with those tokens prefills only the rest (the idea of vLLM's automatic prefix caching,
per sequence instead of per block).

Only whole-entry prefixes of finished sequences are reused. Partial overlaps (the shared prompt
of a group's samples) would make what a sequence computes depend on which other sequence
happened to finish first. The beginnings that prompts admitted together shared
(``shared_prefix``) are kept apart, a few of them (``MAX_SHARED``), and a later prompt reuses as
much of one as it begins with (``shared_base``): an eval admits most episodes' first prompts one
at a time, after its first batch, and every one of them begins with the env's system prompt
(716 of the web job's ~980 first-prompt tokens). What a shared beginning's keys hold is already
a matter of what was admitted together, equal up to float rounding (``shared_prefix``).
Entries are evicted least recently used first beyond ``capacity_bytes`` or beyond
``max_entries``, and the cache must be cleared whenever the weights change.

An entry pays off only when its conversation sends a next turn, so the number of entries worth
keeping follows the conversations in flight, not the bytes free: a gateway answering thousands
of short conversations from 16 clients held every one of them until the byte limit (the tiny
model's server grew by 200 MB over 6,000 calls in ``bench/soak.py``, flat without the cache).
The entry limit is ``MIN_ENTRIES`` or twice the most requests the engine has seen outstanding
at once, whichever is larger, so a lockstep rollout of 512 episodes still keeps all 512.
An episode that ends drops its entries at once (``discard``, from ``Policy.end_session``): an
eval of 200 SmolLM2 episodes, 16 at a time, otherwise grew by 470 MB as finished episodes filled
the cache to its byte limit after warm-up.

Entries are indexed by (length, rolling hash of their tokens), so finding the longest entry that
prefixes a prompt, or the entries a new one extends, costs one pass over the prompt whatever the
number of entries (a rollout or an eval leaves one per episode).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

MIN_ENTRIES = 256
MAX_SHARED = 4
"""Shared beginnings kept for later prompts: the deepest parts of the latest batches."""
_HASH_MODULUS = (1 << 61) - 1
_HASH_BASE = 1_000_003


def prefix_hashes(tokens: Sequence[int], upto: int) -> list[int]:
    """``hashes[n]`` identifies ``tokens[:n]`` for ``n`` in ``0..upto`` (a polynomial rolling
    hash; equal hashes are confirmed by comparing the tokens)."""
    hashes = [0]
    value = 0
    for token in tokens[:upto]:
        value = (value * _HASH_BASE + token + 1) % _HASH_MODULUS
        hashes.append(value)
    return hashes


@dataclass
class PrefixEntry:
    """The keys and values (per layer, ``[H, T, D]``) of the ``T`` tokens in ``tokens``."""

    tokens: list[int]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    adapter_key: int = 0
    """The LoRA adapter that computed them (``LoraAdapter.key``; 0: the base weights)."""

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def head(self, length: int) -> PrefixEntry:
        """The entry of the first ``length`` tokens: under a causal mask their keys and values
        depend on nothing after them."""
        if length == len(self.tokens):
            return self
        return PrefixEntry(
            self.tokens[:length],
            [k[:, :length] for k in self.keys],
            [v[:, :length] for v in self.values],
            self.adapter_key,
        )


def common_length(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """How many tokens ``a`` and ``b`` begin with alike, at most ``limit``."""
    n = 0
    for x, y in zip(a[:limit], b[:limit], strict=False):
        if x != y:
            break
        n += 1
    return n


class PrefixCache:
    """Finished sequences' states, looked up by the longest one that prefixes a prompt."""

    def __init__(
        self, capacity_bytes: int, min_entries: int = MIN_ENTRIES, max_shared: int = MAX_SHARED
    ) -> None:
        self.capacity_bytes = capacity_bytes
        self.max_entries = min_entries
        self.max_shared = max_shared
        """Shared beginnings kept for later prompts (0: none)."""
        self._entries: OrderedDict[tuple[int, ...], PrefixEntry] = OrderedDict()
        self._index: dict[tuple[int, int], tuple[int, ...]] = {}
        self._hash_of: dict[tuple[int, ...], int] = {}
        self._lengths: Counter[int] = Counter()
        self._bytes = 0
        self._shared: OrderedDict[tuple[int, tuple[int, ...]], PrefixEntry] = OrderedDict()
        self.hits = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def expect_outstanding(self, requests: int) -> None:
        """``requests`` are waiting or decoding at once: keep room for each one's next turn."""
        self.max_entries = max(self.max_entries, 2 * requests)

    def lookup(self, prompt: list[int], adapter_key: int = 0) -> PrefixEntry | None:
        """The longest entry that is a proper prefix of ``prompt`` (at least one prompt token
        is left to compute the next token's logits from) and was computed under the adapter
        ``adapter_key``, or None."""
        if not self._lengths:
            return None
        longest = min(len(prompt) - 1, max(self._lengths))
        found = next(
            (
                key
                for key in self._prefixes_of(prompt, prefix_hashes(prompt, longest))
                if self._entries[key].adapter_key == adapter_key
            ),
            None,
        )
        if found is None:
            return None
        self._entries.move_to_end(found)
        best = self._entries[found]
        self.hits += 1
        self.reused_tokens += len(best.tokens)
        return best

    def store(self, entry: PrefixEntry) -> None:
        """Keep ``entry``; entries it extends are dropped (it serves their prompts too)."""
        if not entry.tokens or entry.nbytes > self.capacity_bytes:
            return
        key = tuple(entry.tokens)
        hashes = prefix_hashes(key, len(key))
        for old_key in list(self._prefixes_of(key, hashes)):
            self._drop(old_key)
        slot = (len(key), hashes[-1])
        if slot in self._index:  # a hash collision: the older entry makes way
            self._drop(self._index[slot])
        self._entries[key] = entry
        self._index[slot] = key
        self._hash_of[key] = hashes[-1]
        self._lengths[len(key)] += 1
        self._bytes += entry.nbytes
        while self._bytes > self.capacity_bytes or len(self._entries) > self.max_entries:
            self._drop(next(iter(self._entries)))

    def remember_shared(self, entry: PrefixEntry) -> None:
        """Keep a beginning that prompts admitted together shared, for later prompts."""
        key = (entry.adapter_key, tuple(entry.tokens))
        self._shared[key] = entry
        self._shared.move_to_end(key)
        while len(self._shared) > self.max_shared:
            self._shared.popitem(last=False)

    def shared_base(
        self, prompt: Sequence[int], adapter_key: int, min_tokens: int
    ) -> PrefixEntry | None:
        """The longest beginning of a kept shared part that ``prompt`` starts with (at least
        ``min_tokens`` of it, and one prompt token left), computed under ``adapter_key``."""
        best: tuple[int, tuple[int, tuple[int, ...]]] | None = None
        for key, entry in self._shared.items():
            if entry.adapter_key != adapter_key:
                continue
            length = common_length(entry.tokens, prompt, len(prompt) - 1)
            if length >= min_tokens and (best is None or length > best[0]):
                best = (length, key)
        if best is None:
            return None
        length, key = best
        self._shared.move_to_end(key)
        return self._shared[key].head(length)

    def discard(self, tokens: Sequence[int]) -> None:
        """Drop the entries ``tokens`` starts with: a finished conversation's, which no prompt
        will continue."""
        for key in list(self._prefixes_of(tokens, prefix_hashes(tokens, len(tokens)))):
            self._drop(key)

    def clear(self) -> None:
        self._entries.clear()
        self._shared.clear()
        self._index.clear()
        self._hash_of.clear()
        self._lengths.clear()
        self._bytes = 0

    def _prefixes_of(self, tokens: Sequence[int], hashes: list[int]) -> Iterator[tuple[int, ...]]:
        """Keys of the entries equal to ``tokens[:n]``, ``hashes[n]`` being its hash, longest
        first."""
        for n in range(len(hashes) - 1, 0, -1):
            if n in self._lengths:
                key = self._index.get((n, hashes[n]))
                if key is not None and key == tuple(tokens[:n]):
                    yield key

    def _drop(self, key: tuple[int, ...]) -> None:
        self._bytes -= self._entries.pop(key).nbytes
        del self._index[(len(key), self._hash_of.pop(key))]
        self._lengths[len(key)] -= 1
        if not self._lengths[len(key)]:
            del self._lengths[len(key)]
