"""return_freed_memory: glibc's mmap threshold stays fixed, so freed tensors leave the process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from trajforge.memory import MMAP_THRESHOLD_BYTES, return_freed_memory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")

# Run in a fresh interpreter: in a long-lived one a free heap chunk left by earlier work can
# serve the tensor whatever the threshold (glibc looks in its bins before it maps).
PROBE = """
import ctypes, sys
import torch
from trajforge.memory import return_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
        "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "fixed":
    assert return_freed_memory()
# Unfixed, glibc raises its threshold to 16 MiB on this free, and the 8 MiB tensor below comes
# from the heap, where a long-lived neighbour can pin it.
big = torch.empty(16 * 2**20, dtype=torch.uint8)
del big
before = libc.mallinfo2().hblkhd
tensor = torch.empty(8 * 2**20, dtype=torch.uint8)
print(libc.mallinfo2().hblkhd - before)
"""


def mapped_growth(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], env=env, capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


def test_a_freed_big_block_does_not_move_later_tensors_onto_the_heap() -> None:
    assert mapped_growth("fixed") >= 8 * 2**20 > MMAP_THRESHOLD_BYTES
    assert mapped_growth("default") == 0  # the drift the fix stops


def test_the_users_own_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    return_freed_memory.cache_clear()
    try:
        assert return_freed_memory() is False
    finally:
        monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
        return_freed_memory.cache_clear()
        assert return_freed_memory() is True
