"""Test-wide settings: quiet, deterministic, offline, and on the machine most users have.

Every test runs as on a CPU without native bf16 (``TRAJFORGE_NO_NATIVE_BF16``), whatever the
host has, so the fp32 path is the one the whole suite exercises on every machine. Tests that
need the host's own bf16 take the ``native_bf16`` fixture (skipped where the host has none);
``machine_precision`` runs a test once each way.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trajforge.precision import NO_NATIVE_BF16_ENV, hardware_bf16

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ[NO_NATIVE_BF16_ENV] = "1"
# The disk is shared with other machines' work; a local cluster's test objects are kilobytes,
# so Ray's refusal to store any past 95% full would fail tests on another's files.
os.environ.setdefault("RAY_local_fs_capacity_threshold", "0.99")


@pytest.fixture
def native_bf16(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The host's own native bf16, for tests of the bf16 path; skipped where there is none."""
    if not hardware_bf16():
        pytest.skip("the host has no native bf16 (AMX, AVX512-BF16 or a bf16 GPU)")
    monkeypatch.delenv(NO_NATIVE_BF16_ENV)
    yield


@pytest.fixture(params=["no_native_bf16", "native_bf16"])
def machine_precision(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test as on a machine without native bf16, then (where the host has it) with it;
    the value is the precision ``auto`` resolves to."""
    if request.param == "native_bf16":
        if not hardware_bf16():
            pytest.skip("the host has no native bf16 (AMX, AVX512-BF16 or a bf16 GPU)")
        monkeypatch.delenv(NO_NATIVE_BF16_ENV)
        return "bf16"
    return "fp32"


def _pids_with(marker: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker.encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@pytest.fixture
def processes_with() -> Callable[[str], list[int]]:
    """The pids of live processes whose command line contains a marker: what a test left."""
    return _pids_with


@pytest.fixture(scope="module")
def module_tmp(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Path]:
    """A folder the module's tests share, removed when the module ends, as a passing test's
    ``tmp_path`` is: kept, the suite's folders would fill a shared disk."""
    folder = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
