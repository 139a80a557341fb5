"""Optional layer (extra ``trajforge[ray]``): rollouts on Ray actors.

The driver (the process that calls ``open_rollout``) keeps a run's bookkeeping: its plan, the
store (the single source of truth: trajectories are written there as they come back), resume
and the progress display. ``RayRunner`` plays the episodes on rollout actors, each with its own
environments and its own policy replica built from the spec's references (or the shared
endpoint an ``openai:`` policy names). Episodes are handed out one at a time as an actor's
slots free up, so a slow actor never holds the run; an actor that dies has its unfinished
episodes played again elsewhere and is replaced. RL keeps one runner's actors for the whole
run and publishes the new weights to them after every update (``RayRunner.publish``); each
trajectory records the version it was sampled with (``POLICY_VERSION``). For RL's self-play,
``RayRunner.seated`` has the actors play each episode as a whole game of a multi-seat env
(``SeatPlan``), every seat with their own policy or with earlier published weights
(``Snapshot``).

The package sits above ``rollout`` and below ``train`` (RL), the pipeline and the CLI, and no
package below it imports ray. Importing the package does not import ray (``ray_runner`` and
``on_ray`` do, when asked for a runner); ``runner`` (``RayRunner``), ``cluster`` and
``worker`` do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trajforge.distributed.options import LOCAL, POLICY_VERSION, RayOptions, SeatPlan, Snapshot
from trajforge.errors import ConfigError
from trajforge.registry import lazy_names
from trajforge.rollout import LiveParts

if TYPE_CHECKING:
    from trajforge.distributed.cluster import ray_cluster
    from trajforge.distributed.runner import RayRunner

__all__ = [
    "LOCAL",
    "POLICY_VERSION",
    "RayOptions",
    "RayRunner",
    "SeatPlan",
    "Snapshot",
    "on_ray",
    "ray_cluster",
    "ray_runner",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "RayRunner": "runner",
        "ray_cluster": "cluster",
    },
)


def ray_runner(options: RayOptions, *, persistent: bool = False) -> RayRunner:
    """A ``RayRunner`` for ``options`` (a clear error when ray is not installed)."""
    try:
        # lazy: ray takes seconds to import and is an optional extra
        from trajforge.distributed.runner import RayRunner
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"ray: {exc.name} is not installed; install the extra: pip install 'trajforge[ray]'"
        ) from None
    return RayRunner(options, persistent=persistent)


def on_ray(options: RayOptions | None) -> LiveParts:
    """What ``open_rollout`` takes to play its episodes as ``options`` say: a ``RayRunner``,
    or nothing (in this process) when ``options`` is ``None``."""
    return {} if options is None else {"runner": ray_runner(options)}
