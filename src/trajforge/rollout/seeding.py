"""Deterministic identities and seeds: equal inputs give equal runs, in any execution order."""

from __future__ import annotations

import hashlib
import re
import uuid

SEED_BITS = 31  # fits every backend's seed type (torch, numpy, OpenAI-compatible servers)


def _digest(*parts: object) -> bytes:
    text = "\x1f".join(str(p) for p in parts)
    return hashlib.sha256(text.encode("utf-8")).digest()


def derive_seed(seed: int, task_id: str, sample_index: int, turn: int) -> int:
    """The sampling seed of one turn of one sample of one task, in ``[0, 2**31)``."""
    value = int.from_bytes(_digest("seed", seed, task_id, sample_index, turn)[:8], "big")
    return value % (1 << SEED_BITS)


def group_id_for(run_id: str, task_id: str) -> str:
    """The ``group_id`` shared by the samples of a task within a run."""
    return _digest("group", run_id, task_id).hex()[:24]


_GENERATED_RUN_ID = re.compile(r"run-[0-9a-f]{12}")


def new_run_id() -> str:
    """A fresh run id (used when the caller does not name the run)."""
    return f"run-{uuid.uuid4().hex[:12]}"


def is_generated_run_id(run_id: str) -> bool:
    """Whether ``run_id`` is one ``new_run_id`` made (not a name someone gave the run)."""
    return _GENERATED_RUN_ID.fullmatch(run_id) is not None
