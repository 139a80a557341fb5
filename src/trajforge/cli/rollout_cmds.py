"""``trajforge rollout``: run a policy on an environment's tasks and store the trajectories."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from trajforge.cli import memory_options as memory_opts
from trajforge.cli import rollout_options as opts
from trajforge.cli.command_run import command_run
from trajforge.cli.common import (
    JsonOption,
    StoreOption,
    console,
    metric_table,
    print_json,
    rewards_of,
)
from trajforge.cli.failures import finish, stored_failures
from trajforge.judge import RewardSummary
from trajforge.precision import Precision
from trajforge.rollout import RolloutStats
from trajforge.schema import OutcomeStatus

COMMAND = "rollout"


def _summary_table(title: str, stats: RolloutStats, rewards: RewardSummary) -> Table:
    """Episodes, statuses and throughput of this invocation; success and mean reward of every
    stored episode of the run (the same figures when nothing was resumed)."""
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
    return metric_table(title, rows)


@memory_opts.memory_options
def rollout_command(
    ctx: typer.Context,
    env: opts.EnvOption = "calculator",
    model: opts.ModelOption = "embedded",
    user: opts.UserOption = None,
    tasks: opts.TasksOption = 16,
    n: opts.NOption = 1,
    store: StoreOption = None,
    run: opts.RunOption = None,
    resume: opts.ResumeOption = None,
    lockstep: Annotated[
        bool,
        typer.Option("--lockstep", help="Advance all episodes turn by turn together (baseline)."),
    ] = False,
    seed: opts.SeedOption = 0,
    max_turns: opts.MaxTurnsOption = None,
    max_new_tokens: opts.MaxNewTokensOption = 256,
    temperature: opts.TemperatureOption = 1.0,
    split: opts.SplitOption = "train",
    tool_timeout: Annotated[
        float | None, typer.Option("--tool-timeout", help="Seconds one tool call may run.")
    ] = None,
    episode_timeout: Annotated[
        float | None, typer.Option("--episode-timeout", help="Seconds one episode may run.")
    ] = None,
    batch_size: opts.BatchSizeOption = 16,
    concurrency: opts.ConcurrencyOption = None,
    precision: opts.PrecisionOption = Precision.AUTO,
    memory: memory_opts.MemoryOptions = memory_opts.NO_MEMORY,
    ray: opts.RayOption = False,
    ray_address: opts.RayAddressOption = None,
    ray_actors: opts.RayActorsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run a policy on an environment's tasks; store every trajectory as it finishes.

    Ctrl-C stops the run; the episodes that finished stay stored and --resume runs the rest
    (with --ray too: the store stays on this machine).
    """
    # The options reach the run's spec through ctx.params.
    on_ray = opts.ray_options(ctx.params)
    extra = memory.plan(on_ray is not None, user)
    with command_run(ctx, COMMAND, extra) as current:
        learning, update = memory_opts.stored_memory(current.meta, current.env)
        done = current.roll_out(show=not as_json, ray=on_ray, memory=learning, update=update)
        rows = current.db.summaries(run=current.run_id)
        failures = stored_failures(current.db, current.run_id)
    stats = done.stats
    rewards = rewards_of(rows)
    if as_json:
        figures = {k: v for k, v in stats.as_dict().items() if k != "mean_reward"}
        print_json(
            {
                "run_id": current.run_id,
                "store": str(current.db.path),
                "resumed_from": done.resumed,
                "stored": len(rows),
                **figures,
                **rewards.as_dict(),
            }
        )
        finish(failures, len(rows), "episodes")
        return
    mode = ", lockstep" if current.spec.lockstep else ""
    title = f"run {current.run_id} ({current.env}, {current.model}{mode})"
    console.print(_summary_table(title, stats, rewards))
    if done.resumed:
        console.print(
            f"{done.resumed} episodes were already stored; {stats.done} ran now; {len(rows)} in "
            f"the store (success and mean reward cover all {len(rows)})."
        )
    console.print(f"stored in {current.db.path}")
    finish(failures, len(rows), "episodes")


def register(app: typer.Typer) -> None:
    """Add ``trajforge rollout``."""
    app.command(COMMAND)(rollout_command)
