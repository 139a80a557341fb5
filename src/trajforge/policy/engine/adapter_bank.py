"""The adapters one base model serves, by name, resident under a memory cap.

An adapter is registered by name and folder (vLLM's ``/v1/load_lora_adapter``); its fused
weights (``lora``) stay in memory while there is room. Past ``capacity_bytes``, the least
recently used adapter goes, and comes back from its folder the next time a request names it
(vLLM's ``--max-cpu-loras``, S-LoRA's adapter paging). An adapter a live row decodes with is
pinned: never dropped, so the cap may be exceeded by pinned adapters alone, and a request whose
adapter cannot be brought in waits until rows finish and release theirs.

Thread-safe: the gateway registers adapters from its threads while the engine's worker
acquires and releases them.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trajforge.errors import ConfigError
from trajforge.policy.engine.generation_request import GenerationRequest
from trajforge.policy.engine.lora import LoraAdapter

Loader = Callable[[str, Path, int | None], LoraAdapter]
"""Loads the adapter named ``name`` from ``folder`` (with its earlier ``key``, if any)."""


@dataclass
class Registered:
    """A named adapter's folder and identity, resident or not."""

    folder: Path
    key: int
    nbytes: int


class UnknownAdapter(ConfigError):
    """A request names an adapter that is not registered."""


class AdapterBank:
    """Named adapters, the recently used ones resident (see the module doc)."""

    def __init__(self, capacity_bytes: int, loader: Loader) -> None:
        self.capacity_bytes = capacity_bytes
        self._load = loader
        self._registry: dict[str, Registered] = {}
        self._resident: OrderedDict[str, LoraAdapter] = OrderedDict()
        self._pins: Counter[int] = Counter()
        self._lock = threading.Lock()
        self.loads = 0
        self.evictions = 0

    def names(self) -> list[str]:
        with self._lock:
            return list(self._registry)

    def resident(self) -> list[str]:
        """Resident adapters, least recently used first."""
        with self._lock:
            return list(self._resident)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(a.nbytes for a in self._resident.values())

    def register(self, name: str, folder: Path) -> None:
        """Serve the adapter in ``folder`` as ``name`` (replacing what ``name`` was). It is
        loaded now, so a bad folder fails here, and stays resident if there is room."""
        adapter = self._load(name, folder, None)
        self.loads += 1
        if adapter.nbytes > self.capacity_bytes:
            raise ConfigError(
                f"adapter {name!r}: {adapter.nbytes / 2**20:.1f} MiB does not fit the adapter "
                f"memory cap of {self.capacity_bytes / 2**20:.1f} MiB"
            )
        with self._lock:
            self._resident.pop(name, None)
            self._registry[name] = Registered(folder, adapter.key, adapter.nbytes)
            if self._make_room(adapter.nbytes):
                self._resident[name] = adapter

    def remove(self, name: str) -> None:
        """Stop serving ``name``; rows decoding with it finish with it."""
        with self._lock:
            if name not in self._registry:
                raise self._unknown(name)
            del self._registry[name]
            self._resident.pop(name, None)

    def check(self, name: str) -> None:
        """Raise ``UnknownAdapter`` (naming the registered ones) unless ``name`` is served."""
        with self._lock:
            if name not in self._registry:
                raise self._unknown(name)

    def acquire(self, name: str) -> LoraAdapter | None:
        """``name``'s adapter, pinned until ``release``: loaded first if it is not resident,
        None while pinned adapters leave it no room. Raises ``UnknownAdapter``."""
        with self._lock:
            if name not in self._registry:
                raise self._unknown(name)
            adapter = self._resident.get(name)
            if adapter is not None:
                self._resident.move_to_end(name)
                self._pins[adapter.key] += 1
                return adapter
            entry = self._registry[name]
            if not self._make_room(entry.nbytes):
                return None
            # Loaded under the lock: a concurrent ``register`` of the same name must not be
            # overtaken by this older folder's weights.
            adapter = self._load(name, entry.folder, entry.key)
            self.loads += 1
            self._resident[name] = adapter
            self._pins[adapter.key] += 1
            return adapter

    def hold(self, request: GenerationRequest) -> bool:
        """Pin the adapter ``request`` names onto it until ``let_go`` (True at once if it holds
        one already); False while there is no room for it."""
        if request.adapter is None and request.adapter_name is not None:
            request.adapter = self.acquire(request.adapter_name)
        return request.adapter is not None or request.adapter_name is None

    def let_go(self, request: GenerationRequest) -> None:
        """Unpin ``request``'s adapter, if it holds one, and forget it there."""
        if request.adapter is not None:
            self.release(request.adapter)
        request.adapter = None

    def release(self, adapter: LoraAdapter) -> None:
        """A row that decoded with ``adapter`` finished."""
        with self._lock:
            self._pins[adapter.key] -= 1
            if self._pins[adapter.key] <= 0:
                del self._pins[adapter.key]
            self._make_room(0)

    def _make_room(self, extra: int) -> bool:
        """Drop unpinned adapters, least recently used first, until ``extra`` more bytes fit
        under the cap; False if pinned adapters leave too little room."""
        used = sum(a.nbytes for a in self._resident.values())
        for name in list(self._resident):
            if used + extra <= self.capacity_bytes:
                break
            adapter = self._resident[name]
            if self._pins[adapter.key]:
                continue
            del self._resident[name]
            used -= adapter.nbytes
            self.evictions += 1
        return used + extra <= self.capacity_bytes

    def _unknown(self, name: str) -> UnknownAdapter:
        loaded = ", ".join(self._registry) or "none"
        return UnknownAdapter(f"adapter {name!r} is not loaded; loaded adapters: {loaded}")
