"""The options that pick trajectories out of a store (``--run``, ``--env``, ``--status``,
rewards, ``--signal``, ``--limit``), checked into one ``TrajectoryFilter``, and the store a
command opens."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from trajforge.cli.common import resolve_store_path
from trajforge.cli.option_groups import Command, option_group
from trajforge.errors import ConfigError, StoreError
from trajforge.schema import OutcomeStatus
from trajforge.store import TrajectoryFilter, TrajectoryStore, validate_named
from trajforge.triage import Signal, signal_score_name

STATUSES = tuple(status.value for status in OutcomeStatus)

RunFilter = Annotated[
    str | None, typer.Option("--run", help="Only this run id (or a unique prefix of it).")
]
EnvFilter = Annotated[str | None, typer.Option("--env", help="Only this environment.")]
StatusFilter = Annotated[
    str | None,
    typer.Option("--status", help=f"Only this outcome status ({', '.join(STATUSES)})."),
]
SignalFilter = Annotated[
    Signal | None,
    typer.Option("--signal", help="Only trajectories `trajforge triage` found this signal in."),
]
MinReward = Annotated[float | None, typer.Option("--min-reward", help="Only rewards >= this.")]
MaxReward = Annotated[float | None, typer.Option("--max-reward", help="Only rewards <= this.")]
Limit = Annotated[int | None, typer.Option("--limit", help="At most this many trajectories.")]


def _option(field: str) -> str:
    return "--" + field.replace("_", "-")


def store_filter(
    st: TrajectoryStore,
    run: str | None,
    env: str | None,
    status: str | None,
    min_reward: float | None,
    max_reward: float | None,
    signal: Signal | None = None,
) -> TrajectoryFilter:
    """The store filter the options ask for, with ``--run`` resolved from a unique prefix.

    A value that cannot match (a misspelt status or env, an empty reward range) is refused
    rather than answered with an empty listing that looks like missing data.
    """
    fields = {"status": status, "min_reward": min_reward, "max_reward": max_reward}
    if signal is not None:
        fields["score"] = signal_score_name(signal)
    found = validate_named(TrajectoryFilter, fields, _option, ConfigError)
    if env is not None:
        known = st.envs()
        if known and env not in known:
            raise ConfigError(
                f"--env: {env!r} is not one of {', '.join(known)} (the envs in {st.path})"
            )
    if run is not None:
        try:
            run = st.resolve_run_id(run)
        except StoreError as exc:
            raise StoreError(f"--run: {exc}") from None
    return found.model_copy(update={"run": run, "env": env})


StoreFilterOf = Callable[[TrajectoryStore], TrajectoryFilter]
"""What a command given the filter options by ``filter_options`` gets: the store filter they
ask for in a store (``store_filter``)."""


def _filter_of(**values: Any) -> StoreFilterOf:
    return lambda st: store_filter(st, **values)


_FILTER_OPTIONS: dict[str, Any] = {
    "run": RunFilter,
    "env": EnvFilter,
    "status": StatusFilter,
    "min_reward": MinReward,
    "max_reward": MaxReward,
    "signal": SignalFilter,
}


def filter_options(*, signal: bool = True) -> Callable[[Command], Command]:
    """Give a command the filter options where its ``where`` parameter stands: ``--run``,
    ``--env``, ``--status``, ``--min-reward``, ``--max-reward`` and (unless ``signal`` is
    False) ``--signal``; the command gets them as one ``StoreFilterOf``."""
    names = [name for name in _FILTER_OPTIONS if signal or name != "signal"]
    return option_group(
        "where", _filter_of, {name: (_FILTER_OPTIONS[name], None) for name in names}
    )


def check_limit(limit: int | None) -> None:
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit: must be at least 1, got {limit}")


def open_store(store: Path | None, *, create: bool = False) -> Any:
    """The store at ``--store`` (or the default); a read-only command never creates one."""
    path = resolve_store_path(store)
    if not create and not path.exists():
        raise StoreError(
            f"no store at {path} (import or collect trajectories first, or pass --store)"
        )
    return TrajectoryStore(path, create=create)
