"""``trajforge rollout``: run a policy on an environment's tasks and store the trajectories."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import BaseModel, ConfigDict, Field

from trajforge.cli.common import (
    JsonOption,
    StoreOption,
    console,
    err_console,
    print_json,
    resolve_store_path,
)
from trajforge.errors import ConfigError

if TYPE_CHECKING:
    from trajforge.rollout.progress import RolloutStats
    from trajforge.store.sqlite import TrajectoryStore

# Policies whose constructor is HFPolicy's and so takes a batch size.
_BATCHED_MODELS = ("embedded", "tiny")


class RolloutSettings(BaseModel):
    """What a ``trajforge rollout`` run was started with; stored with the run so that
    ``--resume RUN`` continues it with exactly the same settings."""

    model_config = ConfigDict(extra="forbid")

    env: str
    model: str
    tasks: int = Field(ge=1)
    n: int = Field(ge=1)
    split: str
    seed: int
    lockstep: bool
    max_turns: int | None = Field(default=None, ge=1)
    max_new_tokens: int = Field(ge=1)
    temperature: float = Field(ge=0)
    tool_timeout_s: float | None = Field(default=None, gt=0)
    episode_timeout_s: float | None = Field(default=None, gt=0)
    batch_size: int = Field(ge=1)
    concurrency: int | None = Field(default=None, ge=1)


def _settings_of_run(store: TrajectoryStore, run_id: str) -> RolloutSettings:
    meta = store.get_run(run_id)
    if meta is None:
        raise ConfigError(f"--resume: no run {run_id!r} in {store.path}")
    cli = meta.get("cli")
    if not isinstance(cli, dict):
        raise ConfigError(
            f"--resume: run {run_id!r} in {store.path} was not started by `trajforge rollout`"
        )
    return RolloutSettings.model_validate(cli)


async def _run(
    settings: RolloutSettings, store: TrajectoryStore, run_id: str, stats: RolloutStats, show: bool
) -> int:
    from trajforge.envs.registry import get_env
    from trajforge.policy.base import SamplingParams
    from trajforge.policy.naming import load_policy
    from trajforge.rollout import Limits, rollout_stream
    from trajforge.rollout.progress import RolloutProgress

    entry = get_env(settings.env)
    tasks = entry.tasks(settings.tasks, seed=settings.seed, split=settings.split)
    kwargs: dict[str, Any] = (
        {"max_batch_size": settings.batch_size} if settings.model in _BATCHED_MODELS else {}
    )

    policy = load_policy(settings.model, expert=entry.expert, **kwargs)
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


def rollout_command(
    env: Annotated[
        str,
        typer.Option(
            "--env", help="Environment: built-in name, module:factory or file.py:factory."
        ),
    ] = "calculator",
    model: Annotated[
        str,
        typer.Option(
            "--model", help="Policy: embedded, tiny, expert, a model folder, openai:<url>#<model>."
        ),
    ] = "embedded",
    tasks: Annotated[
        int, typer.Option("--tasks", min=1, help="How many tasks of the environment to run.")
    ] = 16,
    n: Annotated[
        int, typer.Option("--n", min=1, help="Samples per task (they share a group id).")
    ] = 1,
    store: StoreOption = None,
    run: Annotated[
        str | None, typer.Option("--run", help="Name of the new run (default: a fresh id).")
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option("--resume", help="Continue this run: run only its missing episodes."),
    ] = None,
    lockstep: Annotated[
        bool,
        typer.Option("--lockstep", help="Advance all episodes turn by turn together (baseline)."),
    ] = False,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of the task sample and of every sampling seed.")
    ] = 0,
    max_turns: Annotated[
        int | None, typer.Option("--max-turns", min=1, help="Assistant turns per episode.")
    ] = None,
    max_new_tokens: Annotated[
        int, typer.Option("--max-new-tokens", min=1, help="Tokens per assistant turn.")
    ] = 256,
    temperature: Annotated[
        float, typer.Option("--temperature", min=0.0, help="Sampling temperature.")
    ] = 1.0,
    split: Annotated[str, typer.Option("--split", help="Task split: train or test.")] = "train",
    tool_timeout: Annotated[
        float | None, typer.Option("--tool-timeout", help="Seconds one tool call may run.")
    ] = None,
    episode_timeout: Annotated[
        float | None, typer.Option("--episode-timeout", help="Seconds one episode may run.")
    ] = None,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, help="Sequences the local model decodes together.")
    ] = 16,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", min=1, help="Episodes running at once (default: all)."),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Run a policy on an environment's tasks; store every trajectory as it finishes."""
    from trajforge.rollout.progress import RolloutStats
    from trajforge.rollout.seeding import new_run_id
    from trajforge.store.sqlite import TrajectoryStore

    if run is not None and resume is not None:
        raise ConfigError("--run and --resume: give one (--resume continues an existing run)")
    path: Path = resolve_store_path(store)
    with TrajectoryStore(path) as db:
        if resume is not None:
            run_id = resume
            settings = _settings_of_run(db, resume)
        else:
            run_id = run or new_run_id()
            if db.get_run(run_id) is not None or db.count(run=run_id):
                raise ConfigError(
                    f"--run: run {run_id!r} already exists in {path}; use --resume {run_id} to continue it"
                )
            settings = RolloutSettings(
                env=env,
                model=model,
                tasks=tasks,
                n=n,
                split=split,
                seed=seed,
                lockstep=lockstep,
                max_turns=max_turns,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                tool_timeout_s=tool_timeout,
                episode_timeout_s=episode_timeout,
                batch_size=batch_size,
                concurrency=concurrency,
            )
            db.set_run(
                run_id, {"cli": settings.model_dump(mode="json"), "model": model, "env": env}
            )
        stats = RolloutStats(total=settings.tasks * settings.n)
        resumed = asyncio.run(_run(settings, db, run_id, stats, show=not json_output))
        stored = db.count(run=run_id)
    summary = {
        "run_id": run_id,
        "store": str(path),
        "resumed_from": resumed,
        "stored": stored,
        **stats.as_dict(),
    }
    if json_output:
        print_json(summary)
        return
    title = f"run {run_id} ({settings.env}, {settings.model}{', lockstep' if settings.lockstep else ''})"
    console.print(stats.table(title=title))
    if resumed:
        console.print(
            f"{resumed} episodes were already stored; {stats.done} ran now; {stored} in the store."
        )
    console.print(f"stored in {path}")


def register(app: typer.Typer) -> None:
    """Add ``trajforge rollout``."""
    app.command("rollout")(rollout_command)
