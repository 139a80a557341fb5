"""A run of ``trajforge rollout``, ``eval`` or ``collect``: started from its spec (stored as
the run's metadata so that ``--resume`` continues it) or resumed, its episodes run into the
store, and the exit on Ctrl-C that says how to resume."""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError

from trajforge.cli.common import err_console, resolve_store_path
from trajforge.cli.rollout_options import check_names, spec_from_options
from trajforge.distributed import RayOptions, on_ray
from trajforge.errors import ConfigError, StoreError
from trajforge.memory import Memory, read_with
from trajforge.rollout import (
    EpisodeRunner,
    LiveParts,
    RolloutHook,
    RolloutProgress,
    RolloutRun,
    RolloutSpec,
    new_run_id,
    open_rollout,
)
from trajforge.store import TrajectoryStore

# With --resume a run keeps its spec; these options may still be given (where the episodes
# are played is not part of the run).
_RESUME_OPTIONS = frozenset({"resume", "store", "as_json", "ray", "ray_address", "ray_actors"})


@dataclass
class CommandRun:
    """A run of ``trajforge rollout`` or ``trajforge eval``: its store, spec and metadata."""

    db: TrajectoryStore
    run_id: str
    spec: RolloutSpec
    meta: dict[str, Any]
    resumed: bool

    @property
    def env(self) -> str:
        return self.spec.env or "-"

    @property
    def model(self) -> str:
        return self.spec.policy.name if self.spec.policy is not None else "-"

    def roll_out(
        self,
        show: bool,
        ray: RayOptions | None = None,
        runner: EpisodeRunner | None = None,
        memory: Memory | None = None,
        update: bool = False,
    ) -> RolloutRun:
        """Run the episodes the store does not hold yet, storing each as it ends (with a
        progress bar when ``show``; played by ``runner`` when given, else on Ray actors when
        ``ray``, else here; each env reading ``memory`` when given (a runner is given it by
        its maker: an agent program's gateway session adds the lessons), which learns from
        every finished episode with ``update``); returns the run, with this invocation's
        figures."""
        live = on_ray(ray) if runner is None else LiveParts(runner=runner)
        hooks = read_with(live, memory, update)
        return asyncio.run(_roll_out(self.spec, self.db, show, live, hooks))


class SampleNotice(RolloutHook):
    """Says, before the first episode, that the env's split has fewer tasks than ``--tasks``."""

    def on_rollout_start(self, run: RolloutRun) -> None:
        shortfall = run.sample_shortfall()
        if shortfall is not None:
            err_console.print(f"[yellow]note:[/yellow] {shortfall}", soft_wrap=True)


async def _roll_out(
    spec: RolloutSpec,
    db: TrajectoryStore,
    show: bool,
    live: LiveParts,
    extra_hooks: Sequence[RolloutHook] = (),
) -> RolloutRun:
    hooks: list[RolloutHook] = [SampleNotice(), *extra_hooks]
    if show:
        hooks.append(RolloutProgress(console=err_console))
    live["store"], live["hooks"] = db, hooks
    async with open_rollout(spec, **live) as stream:
        async for _ in stream:
            pass
    return stream.run


def new_run(
    db: TrajectoryStore,
    command: str,
    run: str | None,
    spec: RolloutSpec,
    extra: Mapping[str, Any] | None = None,
) -> CommandRun:
    """Register a new run of ``command`` with its spec; its id is ``run`` or a fresh one,
    which is printed at once so that an interrupted run can be found and resumed."""
    run_id = run or new_run_id()
    if db.get_run(run_id) is not None or db.count(run=run_id):
        raise ConfigError(
            f"--run: run {run_id!r} already exists in {db.path}; "
            f"use --resume {run_id} to continue it"
        )
    if run is None:
        err_console.print(f"run id: [bold]{run_id}[/bold]", soft_wrap=True)
    spec = spec.model_copy(update={"run_id": run_id})
    meta = {"command": command, "spec": spec.model_dump(mode="json"), **(extra or {})}
    db.set_run(run_id, meta)
    return CommandRun(db, run_id, spec, meta, resumed=False)


def open_run_store(path: Path, resume: str | None) -> TrajectoryStore:
    """The store a run goes to; created for a new run, required for ``--resume``."""
    if resume is not None and not path.exists():
        raise ConfigError(f"--resume: no store at {path} (pass the run's --store)")
    return TrajectoryStore(path)


def resume_run(
    ctx: typer.Context, db: TrajectoryStore, command: str, resume: str, run: str | None
) -> CommandRun:
    """The run ``--resume`` names (a unique prefix will do), with its stored spec.

    Options that would change the run are refused rather than silently ignored.
    """
    if run is not None:
        raise ConfigError("--run and --resume: give one (--resume continues an existing run)")
    for param in ctx.command.params:
        # By name: typer bundles its own click, whose ParameterSource is not click's.
        source = ctx.get_parameter_source(param.name or "")
        if (
            source is not None
            and source.name == "COMMANDLINE"
            and param.name not in _RESUME_OPTIONS
        ):
            option = param.opts[0] if param.opts else param.name
            raise ConfigError(
                f"{option}: a resumed run keeps the settings it was started with; "
                "give only --resume and --store"
            )
    try:
        run_id = db.resolve_run_id(resume)
    except StoreError as exc:
        raise ConfigError(f"--resume: {exc}") from None
    meta = db.get_run(run_id) or {}
    started_by = meta.get("command")
    if started_by != command:
        how = f"; resume it with `trajforge {started_by} --resume`" if started_by else ""
        raise ConfigError(
            f"--resume: run {run_id!r} in {db.path} was not started by `trajforge {command}`{how}"
        )
    try:
        spec = RolloutSpec.model_validate(meta["spec"])
    except (KeyError, ValidationError) as exc:
        raise ConfigError(f"--resume: run {run_id!r} has no readable spec: {exc}") from None
    check_names(spec)
    return CommandRun(db, run_id, spec, meta, resumed=True)


@contextmanager
def command_run(
    ctx: typer.Context,
    command: str,
    extra: Mapping[str, Any] | None = None,
    spec_of: Callable[[Mapping[str, Any]], RolloutSpec] = spec_from_options,
) -> Iterator[CommandRun]:
    """The run that ``command``'s options start (its spec as ``spec_of`` reads them), with
    ``extra`` in its metadata (the options are checked before the store is opened, or
    created), or the one ``--resume`` names. On Ctrl-C inside, says what is stored and how to
    resume, and exits with 130."""
    options = ctx.params
    resume: str | None = options["resume"]
    spec = spec_of(options) if resume is None else None
    with open_run_store(resolve_store_path(options["store"]), resume) as db:
        if spec is None:
            started = resume_run(ctx, db, command, resume or "", options["run"])
        else:
            started = new_run(db, command, options["run"], spec, extra)
        with exit_resumably(command, db, started.run_id, started.spec.episodes):
            yield started


def resume_command(command: str, run_id: str, store_path: Path) -> str:
    """The shell command that continues ``run_id``."""
    return (
        f"trajforge {command} --resume {shlex.quote(run_id)} "
        f"--store {shlex.quote(str(store_path.absolute()))}"
    )


@contextmanager
def exit_resumably(command: str, db: TrajectoryStore, run_id: str, episodes: int) -> Iterator[None]:
    """On Ctrl-C: say how many episodes of the run are stored and how to resume it, then exit
    with 130 (every finished episode is already in the store)."""
    try:
        yield
    except KeyboardInterrupt:
        stored = db.count(run=run_id)
        err_console.print(
            f"[red]interrupted[/red]: {stored} of {episodes} episodes of run {run_id} are stored "
            f"in {db.path}; resume with:",
            soft_wrap=True,
        )
        err_console.print(resume_command(command, run_id, db.path), soft_wrap=True, markup=False)
        raise typer.Exit(130) from None
