"""A key/value cache whose rows can join and leave between decode steps.

Each layer keeps its keys and values in a buffer with spare room along the sequence axis, so a
decode step writes one column in place instead of re-concatenating the whole cache (what
transformers' ``DynamicLayer`` does). Rows are left-aligned by padding: a row that joins with a
shorter history is padded on the left, and padding columns are masked out by the attention mask
the engine keeps alongside. Positions are per row, so left padding never shifts a sequence.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

GROWTH = 128
"""Spare columns allocated whenever a buffer runs out of room."""


class GrowingLayer(DynamicLayer):
    """One layer's cache: ``[B, H, capacity, D]`` buffers of which ``length`` columns are used."""

    def __init__(self) -> None:
        super().__init__()
        self.length = 0
        self._key_buf: torch.Tensor | None = None
        self._value_buf: torch.Tensor | None = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if self._key_buf is None or self._value_buf is None or end > self._key_buf.shape[-2]:
            self._reserve(key_states, value_states, end)
        assert self._key_buf is not None and self._value_buf is not None
        self._key_buf[:, :, self.length : end] = key_states
        self._value_buf[:, :, self.length : end] = value_states
        self.length = end
        self._publish()
        return self.keys, self.values  # type: ignore[return-value]

    def get_seq_length(self) -> int:
        return self.length

    def set_state(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Replace the contents with ``keys``/``values`` ``[B, H, T, D]`` (copied, with spare room)."""
        self.is_initialized = True
        self.dtype, self.device = keys.dtype, keys.device
        self.length = 0
        self._key_buf = None
        self._value_buf = None
        self.update(keys, values)

    def _reserve(self, key_states: torch.Tensor, value_states: torch.Tensor, needed: int) -> None:
        batch, heads, _, _ = key_states.shape
        capacity = needed + GROWTH
        key_buf = key_states.new_empty((batch, heads, capacity, key_states.shape[-1]))
        value_buf = value_states.new_empty((batch, heads, capacity, value_states.shape[-1]))
        if self._key_buf is not None and self._value_buf is not None and self.length:
            key_buf[:, :, : self.length] = self._key_buf[:, :, : self.length]
            value_buf[:, :, : self.length] = self._value_buf[:, :, : self.length]
        self._key_buf, self._value_buf = key_buf, value_buf

    def _publish(self) -> None:
        assert self._key_buf is not None and self._value_buf is not None
        self.keys = self._key_buf[:, :, : self.length]
        self.values = self._value_buf[:, :, : self.length]


class RowCache:
    """A ``DynamicCache`` of ``GrowingLayer``s plus the row operations continuous batching needs."""

    def __init__(self, num_layers: int) -> None:
        self.cache = DynamicCache()
        self.cache.layers = [GrowingLayer() for _ in range(num_layers)]

    @property
    def layers(self) -> list[GrowingLayer]:
        return self.cache.layers  # type: ignore[return-value]

    @property
    def length(self) -> int:
        return self.layers[0].length

    def select_rows(self, rows: torch.Tensor, drop_left: int) -> None:
        """Keep only ``rows`` (in that order) and drop the first ``drop_left`` columns."""
        for layer in self.layers:
            layer.set_state(
                layer.keys[rows, :, drop_left:],  # type: ignore[index]
                layer.values[rows, :, drop_left:],  # type: ignore[index]
            )

    def row_states(
        self, row: int, columns: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Copies of one row's keys and values ``[H, T, D]`` per layer, at ``columns`` (a bool
        mask over the cache's columns: the row's unpadded ones).

        The copies are views of one block: a prefix-cache entry lives long, and as dozens of
        separate megabyte tensors it would pin heap pages between the short-lived tensors of
        decoding, which glibc then cannot hand back (one block is big enough to be mmapped)."""
        first = self.layers[0].keys
        assert first is not None
        index = columns.nonzero().squeeze(-1)
        block = first.new_empty((2, len(self.layers), first.shape[1], len(index), first.shape[-1]))
        for i, layer in enumerate(self.layers):
            torch.index_select(layer.keys[row], 1, index, out=block[0, i])  # type: ignore[index]
            torch.index_select(layer.values[row], 1, index, out=block[1, i])  # type: ignore[index]
        return list(block[0].unbind()), list(block[1].unbind())

    @classmethod
    def from_rows(
        cls,
        rows: list[tuple[list[torch.Tensor], list[torch.Tensor]] | None],
        width: int,
        like: torch.Tensor,
    ) -> RowCache:
        """A cache of ``len(rows)`` rows and ``width`` columns: each row's per-layer ``[H, T, D]``
        keys and values right-aligned, zeros (masked by the caller) on their left; ``None`` is
        a row with no history. ``like`` gives dtype and device ([H, *, D] shape of the model)."""
        num_layers = next(len(r[0]) for r in rows if r is not None)
        cache = cls(num_layers)
        heads, dim = like.shape[0], like.shape[-1]
        for index, layer in enumerate(cache.layers):
            keys = like.new_zeros((len(rows), heads, width, dim))
            values = like.new_zeros((len(rows), heads, width, dim))
            for b, row in enumerate(rows):
                if row is not None:
                    length = row[0][index].shape[-2]
                    keys[b, :, width - length :] = row[0][index]
                    values[b, :, width - length :] = row[1][index]
            layer.set_state(keys, values)
        return cache

    def append_rows(self, other: RowCache) -> None:
        """Stack ``other``'s rows under this cache's, left-padding whichever history is shorter."""
        width = max(self.length, other.length)
        for mine, theirs in zip(self.layers, other.layers, strict=True):
            keys = torch.cat([_pad_left(mine.keys, width), _pad_left(theirs.keys, width)])
            values = torch.cat([_pad_left(mine.values, width), _pad_left(theirs.values, width)])
            mine.set_state(keys, values)


def _pad_left(states: torch.Tensor | None, width: int) -> torch.Tensor:
    assert states is not None
    missing = width - states.shape[-2]
    if missing == 0:
        return states
    pad = states.new_zeros((*states.shape[:2], missing, states.shape[-1]))
    return torch.cat([pad, states], dim=-2)
