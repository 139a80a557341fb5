"""Where Ray runs: a local cluster started for the run, or an existing one joined by address."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

import ray

from trajforge.distributed.options import LOCAL, RayOptions


def actor_count(options: RayOptions) -> int:
    """The actors ``options`` asks for on the cluster Ray has joined."""
    if options.actors is not None:
        return options.actors
    cpus = ray.cluster_resources().get("CPU", 1.0)
    return max(1, int(cpus // options.cpus_per_actor))


def _quiet_environment() -> None:
    # No usage statistics leave the machine; a local cluster must work offline.
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ.setdefault("RAY_DISABLE_IMPORT_WARNING", "1")


@contextmanager
def ray_cluster(address: str = LOCAL) -> Iterator[None]:
    """Ray joined for the block: a local cluster started (``address`` ``local``) or an existing
    one; left (and a local one stopped) on the way out. When the caller has joined Ray
    already, the block uses that cluster and leaves it as it was."""
    if ray.is_initialized():
        yield
        return
    _quiet_environment()
    if address == LOCAL:
        ray.init(
            num_cpus=os.cpu_count(),
            include_dashboard=False,
            logging_level=logging.WARNING,
        )
    else:
        ray.init(address=address, logging_level=logging.WARNING)
    try:
        yield
    finally:
        ray.shutdown()
