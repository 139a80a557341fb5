"""Hand freed tensor memory back to the operating system (glibc's ``malloc``).

glibc serves a freed block larger than its mmap threshold straight back to the OS, but raises
that threshold (up to 32 MiB) each time such a block is freed, so that later tensors of a few
MiB come from the heap instead, where long-lived neighbours pin the pages around them. A
process that allocates tensors of ever-changing sizes, as multi-turn decoding does, then keeps
growing: an SFT stage followed by an eval of long keydoor episodes was killed for memory on a
24 GB machine. A fixed threshold stops that drift. 4 MiB keeps training as fast as glibc's
default; a low one (64 KiB) made every activation a fresh mapping and training steps 35-45%
slower.

PyTorch's CPU kernels through oneDNN (bf16 matmuls, and fp32 linears in ``llama_decode``)
keep a compiled primitive, with its scratch buffers, per input shape in two caches of 1,024
entries each (ideep's ``LRU_CACHE_CAPACITY``, oneDNN's ``ONEDNN_PRIMITIVE_CACHE_CAPACITY``).
Generation sees a new shape at almost every step (batch rows x context width), so those caches
grew a gateway serving the tiny model from 865 MB to 1,250 MB over 5,000 requests
(bench/soak.py). Decoding 75 batches of 16 prompts of random lengths on the tiny model (bf16)
grew RSS by 567 MB with the defaults and by 157 MB at 64 entries, 131 MB of it the prefix cache
filling as it should. ``return_freed_memory`` lowers both to ``KERNEL_CACHE_ENTRIES`` before
the first kernel runs.

Freed heap memory that long-lived neighbours pin stays with the process until glibc is asked
for it back (``trim_freed_memory``), as a training stage's activations and optimizer state do.
An experiment trims after every stage, so the next stage, often another model's eval, starts
from what is really in use.

A run that nears the memory it may use says so in its log before the kernel kills it
(``start_memory_watchdog``): a kill leaves only "Killed" behind, with nothing on what was
resident.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import sys
import threading
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import NamedTuple

import psutil

M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's malloc.h
MMAP_THRESHOLD_BYTES = 4 * 2**20
KERNEL_CACHE_ENTRIES = 64
"""A training step's forward and backward use a few dozen shapes; they stay cached."""
KERNEL_CACHES = ("LRU_CACHE_CAPACITY", "ONEDNN_PRIMITIVE_CACHE_CAPACITY")
WARN_FRACTION = 0.9
WATCH_INTERVAL_S = 10.0
CGROUP = Path("/sys/fs/cgroup")
# cgroup v1 writes "no limit" as the largest page-aligned 64-bit count; anything this large is.
NO_LIMIT = 2**60

log = logging.getLogger(__name__)


@cache
def return_freed_memory() -> bool:
    """Fix glibc's mmap threshold and bound oneDNN's kernel caches (once per process); whether
    the threshold was set.

    The caches read their capacity on first use, so this runs before a model's first forward.
    A variable the user set wins; so does ``MALLOC_MMAP_THRESHOLD_``, and the threshold is left
    alone off Linux and on a libc without ``mallopt``.
    """
    for name in KERNEL_CACHES:
        os.environ.setdefault(name, str(KERNEL_CACHE_ENTRIES))
    mallopt = _glibc("mallopt")
    if mallopt is None or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def trim_freed_memory() -> bool:
    """Collect garbage, then hand the heap's free pages back to the OS (glibc's
    ``malloc_trim``); whether any were handed back (False off Linux or without glibc)."""
    gc.collect()
    malloc_trim = _glibc("malloc_trim")
    return malloc_trim is not None and bool(malloc_trim(0))


def _glibc(function: str) -> Callable[..., int] | None:
    """glibc's ``function`` on Linux; None elsewhere or on a libc without it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL("libc.so.6"), function)
    except (OSError, AttributeError):
        return None


class MemoryUse(NamedTuple):
    """This process's resident set and the most it may reach, bytes, and what sets that."""

    rss: int
    limit: int
    source: str


def cgroup_limit(root: Path = CGROUP) -> int | None:
    """The memory limit of the cgroup (v2 ``memory.max``, else v1's), ``None`` if unlimited."""
    for path in (root / "memory.max", root / "memory" / "memory.limit_in_bytes"):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max" or int(text) >= NO_LIMIT:
            return None
        return int(text)
    return None


def mem_available(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """``MemAvailable``: what the kernel can still hand out without swapping, bytes."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def memory_use(root: Path = CGROUP, meminfo: Path = Path("/proc/meminfo")) -> MemoryUse | None:
    """Where this process stands: its resident set against the tighter of the cgroup limit and
    what it would hold with all of ``MemAvailable`` on top (``None`` where neither is known)."""
    rss = psutil.Process().memory_info().rss
    limits = []
    if (cgroup := cgroup_limit(root)) is not None:
        limits.append((cgroup, "the cgroup limit"))
    if (available := mem_available(meminfo)) is not None:
        limits.append((rss + available, "resident + MemAvailable"))
    if not limits:
        return None
    limit, source = min(limits)
    return MemoryUse(rss, limit, source)


class MemoryWatchdog:
    """Warns once, in one log line, when the resident set passes ``fraction`` of the limit."""

    def __init__(
        self,
        fraction: float = WARN_FRACTION,
        read: Callable[[], MemoryUse | None] = memory_use,
    ) -> None:
        self.fraction = fraction
        self.read = read
        self.warned = False

    def check(self) -> str | None:
        """The warning, the first time the process is over the line; else ``None``."""
        use = self.read()
        if self.warned or use is None or use.rss < self.fraction * use.limit:
            return None
        self.warned = True
        message = (
            f"memory: resident set {use.rss / 2**30:.2f} GiB is {use.rss / use.limit:.0%} of the "
            f"{use.limit / 2**30:.2f} GiB this process may use ({use.source}); the kernel "
            "kills it at the limit"
        )
        log.warning(message)
        return message

    def watch(self, interval_s: float, stop: threading.Event) -> None:
        while not self.warned and not stop.wait(interval_s):
            self.check()


@cache
def start_memory_watchdog(interval_s: float = WATCH_INTERVAL_S) -> MemoryWatchdog:
    """Check this process's memory every ``interval_s`` on a daemon thread (once per process;
    later calls return the same watchdog)."""
    watchdog = MemoryWatchdog()
    threading.Thread(
        target=watchdog.watch,
        args=(interval_s, threading.Event()),
        name="trajforge-memory-watchdog",
        daemon=True,
    ).start()
    return watchdog
