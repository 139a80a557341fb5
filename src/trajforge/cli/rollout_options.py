"""What ``trajforge rollout`` and ``trajforge eval`` share: their options (defined once; each
command sets its own defaults), the settings stored with a run so that ``--resume`` continues
it, starting or resuming a run, running its episodes, and the exit on Ctrl-C."""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

from trajforge.cli.common import err_console
from trajforge.errors import ConfigError, StoreError
from trajforge.precision import Precision

if TYPE_CHECKING:
    from trajforge.rollout.progress import RolloutStats
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
TasksOption = Annotated[
    int, typer.Option("--tasks", help="How many tasks of the environment to run.")
]
NOption = Annotated[
    int, typer.Option("--n", help="Samples per task (they share a group id; eval: pass@n).")
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
        help="Assistant turns per episode (rollout: the environment decides, eval: 6).",
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

# With --resume a run keeps its settings; these options may still be given.
_RESUME_OPTIONS = frozenset({"resume", "store", "as_json"})
# Settings fields whose option is not simply ``--field-name``.
_OPTION_OF_FIELD = {"tool_timeout_s": "--tool-timeout", "episode_timeout_s": "--episode-timeout"}


class RolloutSettings(BaseModel):
    """What a ``trajforge rollout`` or ``trajforge eval`` run was started with; stored with the
    run so that ``--resume RUN`` continues it with exactly the same settings."""

    model_config = ConfigDict(extra="forbid")

    env: str
    model: str
    tasks: int = Field(ge=1)
    n: int = Field(ge=1)
    split: Literal["train", "test"]
    seed: int
    lockstep: bool = False
    max_turns: int | None = Field(default=None, ge=1)
    max_new_tokens: int = Field(ge=1)
    temperature: float = Field(ge=0)
    tool_timeout_s: float | None = Field(default=None, gt=0)
    episode_timeout_s: float | None = Field(default=None, gt=0)
    batch_size: int = Field(ge=1)
    concurrency: int | None = Field(default=None, ge=1)
    precision: Precision = Precision.AUTO

    @property
    def episodes(self) -> int:
        return self.tasks * self.n


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


def make_settings(**values: Any) -> RolloutSettings:
    """``RolloutSettings`` from option values; a bad value is a ``ConfigError`` naming its option
    (``--tasks: must be at least 1, got 0``)."""
    try:
        return RolloutSettings(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else ""
        option = _OPTION_OF_FIELD.get(field, "--" + field.replace("_", "-"))
        raise ConfigError(f"{option}: {_explain(err)}") from None


def new_run(
    db: TrajectoryStore,
    command: str,
    run: str | None,
    settings: RolloutSettings,
    extra: dict[str, Any] | None = None,
) -> str:
    """Register a new run of ``command`` with its settings; its id is ``run`` or a fresh one,
    which is printed at once so that an interrupted run can be found and resumed."""
    from trajforge.rollout.seeding import new_run_id

    run_id = run or new_run_id()
    if db.get_run(run_id) is not None or db.count(run=run_id):
        raise ConfigError(
            f"--run: run {run_id!r} already exists in {db.path}; "
            f"use --resume {run_id} to continue it"
        )
    if run is None:
        err_console.print(f"run id: [bold]{run_id}[/bold]", soft_wrap=True)
    meta = {
        "command": command,
        "cli": settings.model_dump(mode="json"),
        "env": settings.env,
        "model": settings.model,
        **(extra or {}),
    }
    db.set_run(run_id, meta)
    return run_id


def open_run_store(path: Path, resume: str | None) -> TrajectoryStore:
    """The store a run goes to; created for a new run, required for ``--resume``."""
    from trajforge.store.sqlite import TrajectoryStore

    if resume is not None and not path.exists():
        raise ConfigError(f"--resume: no store at {path} (pass the run's --store)")
    return TrajectoryStore(path)


def resume_run(
    ctx: typer.Context, db: TrajectoryStore, command: str, resume: str, run: str | None
) -> tuple[str, RolloutSettings, dict[str, Any]]:
    """The run ``--resume`` names (a unique prefix will do), its settings and its metadata.

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
    started_by = meta.get("command", "rollout") if isinstance(meta.get("cli"), dict) else None
    if started_by != command:
        how = f"; resume it with `trajforge {started_by} --resume`" if started_by else ""
        raise ConfigError(
            f"--resume: run {run_id!r} in {db.path} was not started by `trajforge {command}`{how}"
        )
    try:
        settings = RolloutSettings.model_validate(meta["cli"])
    except ValidationError as exc:
        raise ConfigError(f"--resume: run {run_id!r} has unreadable settings: {exc}") from None
    return run_id, settings, meta


def policy_options(settings: RolloutSettings) -> dict[str, Any]:
    """Constructor options of the run's policy: a local model's batch size and the weight dtype
    ``--precision`` resolves to here; nothing for the scripted expert or an endpoint."""
    from trajforge.policy.naming import OPENAI_PREFIX
    from trajforge.precision import resolve_precision, torch_dtype

    if settings.model == "expert" or settings.model.startswith(OPENAI_PREFIX):
        return {}
    resolved = resolve_precision(settings.precision, field="--precision")
    return {"max_batch_size": settings.batch_size, "dtype": torch_dtype(resolved)}


async def run_episodes(
    settings: RolloutSettings, store: TrajectoryStore, run_id: str, stats: RolloutStats, show: bool
) -> int:
    """Run the episodes of ``run_id`` that ``store`` does not hold yet, storing each as it
    ends; returns how many were stored before."""
    from trajforge.envs.registry import get_env
    from trajforge.policy.base import SamplingParams
    from trajforge.policy.naming import load_policy
    from trajforge.rollout import Limits, rollout_stream
    from trajforge.rollout.progress import RolloutProgress

    entry = get_env(settings.env)
    tasks = entry.tasks(settings.tasks, seed=settings.seed, split=settings.split)
    policy = load_policy(settings.model, expert=entry.expert, **policy_options(settings))
    limits = Limits(
        max_turns=settings.max_turns,
        tool_timeout_s=settings.tool_timeout_s,
        episode_timeout_s=settings.episode_timeout_s,
    )
    sampling = SamplingParams(
        temperature=settings.temperature, max_new_tokens=settings.max_new_tokens
    )
    before = len(store.completed_keys(run_id))
    stats.total = len(tasks) * settings.n - before
    stats.started = time.monotonic()  # model loading is not rollout time
    try:
        with RolloutProgress(stats, console=err_console) if show else _Quiet() as display:
            stream = rollout_stream(
                entry.make,
                policy,
                tasks,
                settings.n,
                limits,
                sampling,
                store,
                run_id,
                settings.seed,
                settings.lockstep,
                progress=False,
                max_concurrency=settings.concurrency,
            )
            async for traj in stream:
                stats.add(traj)
                display.update()
    finally:
        await policy.close()
    return before


class _Quiet:
    """The progress display when there is none (``--json``)."""

    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self) -> None:
        return None


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
