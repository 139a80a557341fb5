"""return_freed_memory: glibc's mmap threshold stays fixed, so freed tensors leave the process."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from trajforge.ram import (
    MMAP_THRESHOLD_BYTES,
    MemoryUse,
    MemoryWatchdog,
    cgroup_limit,
    mem_available,
    memory_use,
    return_freed_memory,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")

# Run in a fresh interpreter: in a long-lived one a free heap chunk left by earlier work can
# serve the tensor whatever the threshold (glibc looks in its bins before it maps).
PROBE = """
import ctypes, sys
import torch
from trajforge.ram import return_freed_memory

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


def test_the_cgroup_limit_is_read_from_v2_then_v1(tmp_path: Path) -> None:
    assert cgroup_limit(tmp_path) is None
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert cgroup_limit(tmp_path) is None  # v1's "no limit"
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("4294967296\n")
    assert cgroup_limit(tmp_path) == 4 * 2**30
    (tmp_path / "memory.max").write_text("max\n")
    assert cgroup_limit(tmp_path) is None
    (tmp_path / "memory.max").write_text("2147483648\n")
    assert cgroup_limit(tmp_path) == 2 * 2**30


def test_memory_use_takes_the_tighter_of_the_cgroup_limit_and_mem_available(
    tmp_path: Path,
) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   1048576 kB\n")
    assert mem_available(meminfo) == 2**30
    (tmp_path / "memory.max").write_text(f"{2**50}\n")
    use = memory_use(tmp_path, meminfo)
    assert use is not None
    assert use.limit == use.rss + 2**30 and use.source == "resident + MemAvailable"
    (tmp_path / "memory.max").write_text(f"{use.rss + 2**20}\n")
    use = memory_use(tmp_path, meminfo)
    assert use is not None and use.source == "the cgroup limit"
    assert use.limit - use.rss < 2**21  # the process's RSS moved a little between the reads


def test_the_watchdog_warns_once_past_90_percent_with_the_rss_and_the_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    readings = iter(
        [
            MemoryUse(8 * 2**30, 10 * 2**30, "the cgroup limit"),
            MemoryUse(int(9.5 * 2**30), 10 * 2**30, "the cgroup limit"),
            MemoryUse(int(9.9 * 2**30), 10 * 2**30, "the cgroup limit"),
        ]
    )
    watchdog = MemoryWatchdog(read=lambda: next(readings))
    with caplog.at_level(logging.WARNING, logger="trajforge.ram"):
        assert watchdog.check() is None
        message = watchdog.check()
        assert watchdog.check() is None
    assert message == (
        "memory: resident set 9.50 GiB is 95% of the 10.00 GiB this process may use "
        "(the cgroup limit); the kernel kills it at the limit"
    )
    assert [r.getMessage() for r in caplog.records] == [message]


def test_the_watchdog_thread_stops_after_its_warning() -> None:
    watchdog = MemoryWatchdog(read=lambda: MemoryUse(10, 10, "the cgroup limit"))
    thread = threading.Thread(target=watchdog.watch, args=(0.01, threading.Event()))
    thread.start()
    thread.join(timeout=5)
    assert watchdog.warned and not thread.is_alive()


TRIM_PROBE = """
import ctypes, os
from trajforge.ram import return_freed_memory, trim_freed_memory

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
assert return_freed_memory()
# 1 MiB blocks come from the heap (under the fixed 4 MiB threshold), one after another, each
# written so that it is resident. Freeing every other one leaves holes between blocks still in
# use: nothing reaches the top of the heap, so free() alone hands nothing back.
blocks = []
for _ in range(256):
    blocks.append(libc.malloc(2**20))
    ctypes.memset(blocks[-1], 1, 2**20)
for block in blocks[::2]:
    libc.free(block)
before = rss()
print(trim_freed_memory(), before - rss())
"""


def test_trimming_hands_freed_heap_pages_back() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", TRIM_PROBE], env=env, capture_output=True, text=True, check=True
    )
    trimmed, returned = out.stdout.split()
    assert trimmed == "True"
    assert int(returned) >= 96 * 2**20  # of the 128 MiB freed
