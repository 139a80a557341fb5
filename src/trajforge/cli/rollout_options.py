"""What ``trajforge rollout`` and ``trajforge eval`` share: their options (defined once; each
command sets its own defaults), the ``RolloutSpec`` built from them and stored as the run's
metadata so that ``--resume`` continues it, starting or resuming a run, running its episodes,
and the exit on Ctrl-C. ``trajforge collect`` starts, resumes and runs its runs the same way,
from a spec of its own options."""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from trajforge.cli.common import err_console, resolve_store_path
from trajforge.cli.preflight import check_reachable
from trajforge.distributed import LOCAL, RayOptions, on_ray
from trajforge.envs.registry import get_env
from trajforge.errors import ConfigError, StoreError
from trajforge.memory_bank.live import Memory, MemoryUpdate
from trajforge.policy.naming import check_policy_name
from trajforge.precision import Precision
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
from trajforge.store.sqlite import TrajectoryStore

# Where eval's defaults differ from rollout's, the option's help says so.
EnvOption = Annotated[
    str,
    typer.Option("--env", help="Environment: built-in name, module:factory or file.py:factory."),
]
ModelOption = Annotated[
    str,
    typer.Option(
        "--model", help="Policy: embedded, tiny, expert, a model folder, openai:<url>#<model>."
    ),
]
UserOption = Annotated[
    str | None,
    typer.Option(
        "--user",
        help="Simulated user of an env that has one (retail): a policy as --model takes it; "
        "expert is the env's scripted user (the default).",
    ),
]
TasksOption = Annotated[
    int, typer.Option("--tasks", help="How many tasks of the environment to run.")
]
NOption = Annotated[
    int,
    typer.Option(
        "--n", help="Samples per task (they share a group id; eval reports pass@n and pass^n)."
    ),
]
SplitOption = Annotated[
    str,
    typer.Option("--split", help="Task split: train or test (rollout: train, eval: test)."),
]
SeedOption = Annotated[
    int, typer.Option("--seed", help="Seed of the task sample and of every sampling seed.")
]
TemperatureOption = Annotated[
    float,
    typer.Option("--temperature", help="Sampling temperature (rollout: 1.0, eval: 0, greedy)."),
]
MaxTurnsOption = Annotated[
    int | None,
    typer.Option(
        "--max-turns",
        help="Assistant turns per episode (default: the environment's own limit).",
    ),
]
MaxNewTokensOption = Annotated[
    int, typer.Option("--max-new-tokens", help="Tokens per assistant turn.")
]
ConcurrencyOption = Annotated[
    int | None,
    typer.Option("--concurrency", help="Episodes running at once (default: all)."),
]
BatchSizeOption = Annotated[
    int, typer.Option("--batch-size", help="Sequences a local model decodes together.")
]
PrecisionOption = Annotated[
    Precision,
    typer.Option(
        "--precision",
        help="Weights of a local model: auto (bf16 where the hardware has native bf16, "
        "else fp32), fp32 or bf16.",
    ),
]
RunOption = Annotated[
    str | None, typer.Option("--run", help="Name of the new run (default: a fresh id).")
]
ResumeOption = Annotated[
    str | None,
    typer.Option(
        "--resume",
        metavar="RUN",
        help="Continue this run (or a unique prefix of its id) with the settings it was "
        "started with: run only its missing episodes.",
    ),
]

RayOption = Annotated[
    bool,
    typer.Option(
        "--ray",
        help="Play the episodes on Ray actors: a local cluster of this machine's CPUs, or "
        "the one --ray-address names (needs the ray extra).",
    ),
]
RayAddressOption = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        metavar="ADDRESS",
        help="Join this Ray cluster (auto, host:6379, ray://host:10001); implies --ray.",
    ),
]
RayActorsOption = Annotated[
    int | None,
    typer.Option(
        "--ray-actors", min=1, help="Rollout actors on Ray (default: one per CPU of the cluster)."
    ),
]

# With --resume a run keeps its spec; these options may still be given (where the episodes
# are played is not part of the run).
_RESUME_OPTIONS = frozenset({"resume", "store", "as_json", "ray", "ray_address", "ray_actors"})
# Spec fields whose option is not simply ``--field-name``.
_OPTION_OF_FIELD = {
    "count": "--tasks",
    "name": "--model",
    "tool_timeout_s": "--tool-timeout",
    "episode_timeout_s": "--episode-timeout",
}


def _explain(err: ErrorDetails) -> str:
    ctx = err.get("ctx", {})
    got = err.get("input")
    if err["type"] == "greater_than_equal":
        return f"must be at least {ctx['ge']:g}, got {got:g}"
    if err["type"] == "greater_than":
        return f"must be greater than {ctx['gt']:g}, got {got:g}"
    if err["type"] == "literal_error":
        return f"must be {ctx['expected']}, got {got!r}"
    return str(err["msg"])


def spec_from_options(options: Mapping[str, Any]) -> RolloutSpec:
    """The spec that a fresh run's option values (a command's ``ctx.params``, every option by
    its parameter name) ask for; a bad value is a ``ConfigError`` naming its option
    (``--tasks: must be at least 1, got 0``)."""
    seed = options["seed"]
    data = {
        "env": options["env"],
        "policy": {
            "name": options["model"],
            "batch_size": options["batch_size"],
            "precision": options["precision"],
        },
        "user": None,
        "tasks": {"count": options["tasks"], "split": options["split"], "seed": seed},
        "n": options["n"],
        "limits": {
            "max_turns": options["max_turns"],
            "tool_timeout_s": options.get("tool_timeout"),
            "episode_timeout_s": options.get("episode_timeout"),
        },
        "sampling": {
            "temperature": options["temperature"],
            "max_new_tokens": options["max_new_tokens"],
        },
        "seed": seed,
        "concurrency": options["concurrency"],
        "lockstep": options.get("lockstep", False),
    }
    if options.get("user"):
        data["user"] = {**data["policy"], "name": options["user"]}
    return checked_spec(data)


def checked_spec(data: Mapping[str, Any]) -> RolloutSpec:
    """The spec ``data`` describes, a bad value a ``ConfigError`` naming its option."""
    try:
        spec = RolloutSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        # The last named part of the location: pydantic puts union tags before it.
        field = next((str(p) for p in reversed(err["loc"]) if isinstance(p, str)), "")
        option = _OPTION_OF_FIELD.get(field, "--" + field.replace("_", "-"))
        raise ConfigError(f"{option}: {_explain(err)}") from None
    # Names that name nothing, and bf16 on a machine without it, are refused before the
    # store is opened (or created) and before a run id is printed.
    if spec.env is not None:
        get_env(spec.env)
    for policy in (spec.policy, spec.user):
        if policy is not None:
            check_policy_name(policy.name)
    if spec.policy is not None:
        spec.policy.load_options(field="--precision")
    check_names(spec)
    return spec


def check_names(spec: RolloutSpec) -> None:
    """Refuse an env or policy that names nothing, or a policy or simulated user on a server
    that accepts no connection, before a store is opened or created (or a run id printed)."""
    if spec.env is not None:
        get_env(spec.env)
    for ref, option in ((spec.policy, "--model"), (spec.user, "--user")):
        if ref is not None:
            try:
                check_policy_name(ref.name)
            except ConfigError as exc:
                raise ConfigError(f"{option}: {exc}") from None
            check_reachable(ref.name, option)


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
        ``ray``, else here; each env reading ``memory`` when given, which learns from every
        finished episode with ``update``); returns the run, with this invocation's figures."""
        live = on_ray(ray) if runner is None else LiveParts(runner=runner)
        hooks: list[RolloutHook] = []
        if memory is not None:
            live["wrap_env"] = memory.wrap
            if update:
                hooks.append(MemoryUpdate(memory))
        return asyncio.run(_roll_out(self.spec, self.db, show, live, hooks))


def ray_options(options: Mapping[str, Any]) -> RayOptions | None:
    """Where ``--ray``, ``--ray-address`` and ``--ray-actors`` ask the episodes to be played
    (``None``: in this process)."""
    address: str | None = options.get("ray_address")
    if not options.get("ray") and address is None:
        if options.get("ray_actors") is not None:
            raise ConfigError("--ray-actors: the episodes run on Ray only with --ray")
        return None
    return RayOptions(address=address or LOCAL, actors=options.get("ray_actors"))


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
