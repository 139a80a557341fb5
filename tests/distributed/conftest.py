"""A local Ray cluster of two CPUs, started once per test module that asks for it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import ray


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    """One local cluster for the module; runners use it and leave it up for the next test."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()
