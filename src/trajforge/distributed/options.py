"""``RayOptions``: how a rollout uses Ray, as data (importing it does not import ray)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

LOCAL = "local"
"""The address that starts a local cluster of this machine's CPUs (and stops it after)."""

POLICY_VERSION = "policy_version"
"""The trajectory metadata key of the weights version an episode started with on a Ray actor
(set once weights have been published to the actors, as RL does after each update)."""


class RayOptions(BaseModel):
    """How a rollout uses Ray."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    address: str = Field(default=LOCAL, min_length=1)
    """``local`` (a cluster of this machine, started for the run and stopped after), or an
    existing cluster's address as ``ray.init`` takes it (``auto``, ``host:6379``,
    ``ray://host:10001``)."""
    actors: int | None = Field(default=None, ge=1)
    """Rollout actors (null: one per ``cpus_per_actor`` CPUs of the cluster)."""
    cpus_per_actor: float = Field(default=1.0, gt=0)
    """CPUs Ray reserves for each actor."""
    slots: int | None = Field(default=None, ge=1)
    """Episodes an actor plays at once (null: the run's concurrency shared out over the
    actors, else 8)."""
    max_restarts: int = Field(default=8, ge=0)
    """Actors that may be replaced after dying, over the whole run."""


@dataclass(frozen=True)
class Snapshot:
    """Weights kept from an earlier step (a self-play pool's member), as the actors get them.

    Attributes:
        name: What it is called (``step5``); an actor's policy plays it as ``<policy>@<name>``
            and keeps it by this name.
        weights: The ``ray.ObjectRef`` of its state dict, put in the object store once; it is
            passed inside a call's arguments (not as one), so an actor fetches it only the
            first time it plays it.
    """

    name: str
    weights: Any


@dataclass(frozen=True)
class SeatPlan:
    """How a Ray actor plays a run's episodes as games of a multi-seat env: every seat by
    its own policy (the current weights) except those ``opponents`` gives earlier weights.

    Attributes:
        opponents: Seat to the snapshot that plays it.
        primary: The seat whose trajectory is each episode's own (``None``: the task's
            ``data["seat"]``, else the game's first seat).
    """

    opponents: dict[str, Snapshot] = field(default_factory=dict)
    primary: str | None = None
