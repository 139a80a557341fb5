"""Hand freed tensor memory back to the operating system (glibc's ``malloc``).

glibc serves a freed block larger than its mmap threshold straight back to the OS, but raises
that threshold (up to 32 MiB) each time such a block is freed, so that later tensors of a few
MiB come from the heap instead, where long-lived neighbours pin the pages around them. A
process that allocates tensors of ever-changing sizes, as multi-turn decoding does, then keeps
growing: an SFT stage followed by an eval of long keydoor episodes was killed for memory on a
24 GB machine. A fixed threshold stops that drift. 4 MiB keeps training as fast as glibc's
default; a low one (64 KiB) made every activation a fresh mapping and training steps 35-45%
slower.
"""

from __future__ import annotations

import ctypes
import os
import sys
from functools import cache

M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's malloc.h
MMAP_THRESHOLD_BYTES = 4 * 2**20


@cache
def return_freed_memory() -> bool:
    """Fix glibc's mmap threshold (once per process); whether it was set.

    Does nothing off Linux, on a libc without ``mallopt`` or where ``MALLOC_MMAP_THRESHOLD_``
    is already set (the user's own choice wins).
    """
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
