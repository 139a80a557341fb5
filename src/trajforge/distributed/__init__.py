"""Optional layer (extra ``trajforge[ray]``): rollouts on Ray actors.

The driver (the process that calls ``open_rollout``) keeps a run's bookkeeping: its plan, the
store (the single source of truth: trajectories are written there as they come back), resume
and the progress display. ``RayRunner`` plays the episodes on rollout actors, each with its own
environments and its own policy replica built from the spec's references (or the shared
endpoint an ``openai:`` policy names). Episodes are handed out one at a time as an actor's
slots free up, so a slow actor never holds the run; an actor that dies has its unfinished
episodes played again elsewhere and is replaced. Nothing below this package imports it, and
no package below it imports ray. Importing
the package imports ``RayOptions`` only; ``runner`` (``RayRunner``), ``cluster`` and
``worker`` import ray.
"""

from __future__ import annotations

from trajforge.distributed.options import LOCAL, RayOptions

__all__ = ["LOCAL", "RayOptions"]
