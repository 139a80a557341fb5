"""return_freed_memory: glibc's mmap threshold stays fixed, so freed tensors leave the process."""

from __future__ import annotations

import ctypes
import sys

import pytest
import torch

from trajforge.memory import MMAP_THRESHOLD_BYTES, return_freed_memory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")


class MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
            "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def mmapped_bytes() -> int:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    return int(libc.mallinfo2().hblkhd)


def test_a_freed_big_block_does_not_move_later_tensors_onto_the_heap() -> None:
    assert return_freed_memory() is True
    # Unfixed, glibc would raise its threshold to 16 MiB on this free, and the 8 MiB tensor
    # below would come from the heap, where a long-lived neighbour can pin it.
    big = torch.empty(16 * 2**20, dtype=torch.uint8)
    del big
    before = mmapped_bytes()
    tensor = torch.empty(8 * 2**20, dtype=torch.uint8)
    assert mmapped_bytes() - before >= 8 * 2**20 > MMAP_THRESHOLD_BYTES
    del tensor


def test_the_users_own_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    return_freed_memory.cache_clear()
    try:
        assert return_freed_memory() is False
    finally:
        monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
        return_freed_memory.cache_clear()
        assert return_freed_memory() is True
