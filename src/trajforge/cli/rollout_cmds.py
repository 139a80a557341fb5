"""``trajforge rollout``: run a policy on an environment's tasks and store the trajectories."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from trajforge.cli.common import (
    JsonOption,
    StoreOption,
    console,
    print_json,
    resolve_store_path,
    rewards_of,
)
from trajforge.cli.rollout_options import (
    BatchSizeOption,
    ConcurrencyOption,
    EnvOption,
    MaxNewTokensOption,
    MaxTurnsOption,
    ModelOption,
    NOption,
    PrecisionOption,
    ResumeOption,
    RunOption,
    SeedOption,
    SplitOption,
    TasksOption,
    TemperatureOption,
    exit_resumably,
    make_settings,
    new_run,
    open_run_store,
    resume_run,
    run_episodes,
)
from trajforge.precision import Precision
from trajforge.schema import OutcomeStatus

if TYPE_CHECKING:
    from trajforge.judge.stats import RewardSummary
    from trajforge.rollout.progress import RolloutStats

COMMAND = "rollout"


def _summary_table(title: str, stats: RolloutStats, rewards: RewardSummary) -> Table:
    """Episodes, statuses and throughput of this invocation; success and mean reward of every
    stored episode of the run (the same figures when nothing was resumed)."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("episodes", f"{stats.done}/{stats.total}"),
        *((f"status {s.value}", str(stats.statuses[s.value])) for s in OutcomeStatus),
        ("success", rewards.success_text()),
        ("mean reward", rewards.reward_text()),
        ("scored", rewards.scored_text()),
        ("turns", str(stats.turns)),
        ("tool calls", str(stats.tool_calls)),
        ("completion tokens", str(stats.completion_tokens)),
        ("tokens/s", f"{stats.tokens_per_s:.1f}"),
        ("wall time", f"{stats.elapsed_s:.1f} s"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def rollout_command(
    ctx: typer.Context,
    env: EnvOption = "calculator",
    model: ModelOption = "embedded",
    tasks: TasksOption = 16,
    n: NOption = 1,
    store: StoreOption = None,
    run: RunOption = None,
    resume: ResumeOption = None,
    lockstep: Annotated[
        bool,
        typer.Option("--lockstep", help="Advance all episodes turn by turn together (baseline)."),
    ] = False,
    seed: SeedOption = 0,
    max_turns: MaxTurnsOption = None,
    max_new_tokens: MaxNewTokensOption = 256,
    temperature: TemperatureOption = 1.0,
    split: SplitOption = "train",
    tool_timeout: Annotated[
        float | None, typer.Option("--tool-timeout", help="Seconds one tool call may run.")
    ] = None,
    episode_timeout: Annotated[
        float | None, typer.Option("--episode-timeout", help="Seconds one episode may run.")
    ] = None,
    batch_size: BatchSizeOption = 16,
    concurrency: ConcurrencyOption = None,
    precision: PrecisionOption = Precision.AUTO,
    as_json: JsonOption = False,
) -> None:
    """Run a policy on an environment's tasks; store every trajectory as it finishes.

    Ctrl-C stops the run; the episodes that finished stay stored and --resume runs the rest.
    """
    from trajforge.rollout.progress import RolloutStats

    # A fresh run's options are checked before the store is opened (or created).
    settings = (
        None
        if resume is not None
        else make_settings(
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
            precision=precision,
        )
    )
    path: Path = resolve_store_path(store)
    with open_run_store(path, resume) as db:
        if settings is None:
            run_id, settings, _ = resume_run(ctx, db, COMMAND, resume or "", run)
        else:
            run_id = new_run(db, COMMAND, run, settings)
        stats = RolloutStats(total=settings.episodes)
        with exit_resumably(COMMAND, db, run_id, settings.episodes):
            resumed = asyncio.run(run_episodes(settings, db, run_id, stats, show=not as_json))
        rows = db.summaries(run=run_id)
    rewards = rewards_of(rows)
    if as_json:
        figures = {k: v for k, v in stats.as_dict().items() if k != "mean_reward"}
        print_json(
            {
                "run_id": run_id,
                "store": str(path),
                "resumed_from": resumed,
                "stored": len(rows),
                **figures,
                **rewards.as_dict(),
            }
        )
        return
    mode = ", lockstep" if settings.lockstep else ""
    title = f"run {run_id} ({settings.env}, {settings.model}{mode})"
    console.print(_summary_table(title, stats, rewards))
    if resumed:
        console.print(
            f"{resumed} episodes were already stored; {stats.done} ran now; {len(rows)} in the "
            f"store (success and mean reward cover all {len(rows)})."
        )
    console.print(f"stored in {path}")


def register(app: typer.Typer) -> None:
    """Add ``trajforge rollout``."""
    app.command(COMMAND)(rollout_command)
