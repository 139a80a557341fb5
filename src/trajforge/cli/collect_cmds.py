"""``trajforge collect``: run an agent program once per task x ``--n`` against its own gateway
session, as a rollout: every run stored as it ends, Ctrl-C and ``--resume`` as ``rollout``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from trajforge.cli import memory_options as memory_opts
from trajforge.cli import rollout_options as opts
from trajforge.cli.command_run import command_run
from trajforge.cli.common import JsonOption, StoreOption, console, print_json
from trajforge.cli.failures import finish, stored_failures
from trajforge.cli.serve_cmds import ServeModelOption, check_model
from trajforge.envs import TaskSet
from trajforge.errors import ConfigError
from trajforge.precision import Precision
from trajforge.rollout import RolloutSpec
from trajforge.schema import OutcomeStatus

COMMAND = "collect"


def _spec(options: Mapping[str, Any]) -> RolloutSpec:
    """The spec of a new collection: the tasks of ``--env`` or of ``--tasks-file``."""
    env: str | None = options["env"]
    tasks_file: Path | None = options["tasks_file"]
    if (env is None) == (tasks_file is None):
        raise ConfigError("collect: give --env or --tasks-file FILE.jsonl (one of them)")
    tasks: Any = (
        list(TaskSet.from_jsonl(tasks_file))
        if tasks_file is not None
        else {"count": options["tasks"], "split": options["split"], "seed": options["seed"]}
    )
    policy = {
        "name": options["model"],
        "batch_size": options["batch_size"],
        "precision": options["precision"],
    }
    return opts.checked_spec(
        {
            "env": env,
            "policy": policy,
            "tasks": tasks,
            "n": options["n"],
            "limits": {"episode_timeout_s": options["episode_timeout"]},
            "seed": options["seed"],
            "concurrency": options["concurrency"],
        }
    )


@memory_opts.memory_options
def collect(
    ctx: typer.Context,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            help="Command that runs the agent once, e.g. 'python agent.py' (a new run needs it; "
            "--resume runs the run's own).",
        ),
    ] = None,
    harness: Annotated[
        str | None,
        typer.Option(
            "--harness",
            metavar="NAME",
            help="Run a real agent harness instead of --agent: claude-code, codex or opencode "
            "(its config written for each run and removed after; always confined).",
        ),
    ] = None,
    confine: Annotated[
        bool,
        typer.Option(
            "--confine",
            help="Run each program in the bubblewrap sandbox: a fresh workspace and home, no "
            "network but the gateway, none of this shell's variables, bounded processes.",
        ),
    ] = False,
    confine_read: Annotated[
        list[Path] | None,
        typer.Option(
            "--confine-read",
            metavar="PATH",
            help="A host file or folder a confined run may read (repeatable); the files its "
            "command names and the interpreters are readable already.",
        ),
    ] = None,
    env: Annotated[
        str | None,
        typer.Option("--env", help="Environment whose tasks (and verifier) the agent gets."),
    ] = None,
    tasks: Annotated[int, typer.Option("--tasks", help="How many of --env's tasks to run.")] = 8,
    tasks_file: Annotated[
        Path | None,
        typer.Option(
            "--tasks-file", metavar="FILE.jsonl", help="Run these tasks (one Task per line)."
        ),
    ] = None,
    n: Annotated[
        int, typer.Option("--n", help="Runs of the agent per task (they share a group id).")
    ] = 1,
    concurrency: Annotated[
        int, typer.Option("--concurrency", help="Agent programs running at once.")
    ] = 8,
    episode_timeout: Annotated[
        float,
        typer.Option(
            "--episode-timeout",
            "--timeout",
            help="Seconds one run may take before it, and everything it started, is killed.",
        ),
    ] = 300.0,
    model: ServeModelOption = "embedded",
    split: Annotated[
        str, typer.Option("--split", help="Split of --env the tasks are drawn from: train or test.")
    ] = "train",
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of the task sample drawn from --env.")
    ] = 0,
    run: opts.RunOption = None,
    resume: opts.ResumeOption = None,
    precision: opts.PrecisionOption = Precision.AUTO,
    batch_size: opts.BatchSizeOption = 16,
    ray: Annotated[
        bool,
        typer.Option(
            "--ray",
            help="Run each agent program as a Ray task: on a local cluster of this machine's "
            "CPUs, or the one --ray-address names (needs the ray extra); the gateway and the "
            "store stay here.",
        ),
    ] = False,
    ray_address: opts.RayAddressOption = None,
    memory: memory_opts.MemoryOptions = memory_opts.NO_MEMORY,
    as_json: JsonOption = False,
    store: StoreOption = None,
) -> None:
    """Run an agent program once per task x --n, each against its own gateway session; every
    run is stored as it ends (its model calls as trajectories, ok, error or timeout, with its
    reward). Ctrl-C stops; --resume runs the rest.

    With --memory, each run's gateway session adds the memory's lessons for its task to the
    system message of every model call (the program's prompts stay its own)."""
    # lazy: the runner loads the gateway (uvicorn and fastapi take 0.4 s)
    from trajforge.agent_programs import (
        AGENT_META,
        CONFINE_META,
        HARNESS_META,
        Confinement,
        agent_program,
        program_metadata,
    )

    on_ray = opts.ray_options(ctx.params)
    confined = confine or harness is not None or bool(confine_read)
    confinement = Confinement(read_only=confine_read or []) if confined else None
    if resume is None:
        agent_program(agent or None, harness, confinement)  # fails before the run starts
        check_model(model)
    if memory.memory is not None and env is None and resume is None:
        raise ConfigError(
            f"{memory_opts.MEMORY_OPTION}: give --env (a memory's items belong to an env)"
        )
    # The lessons are added by the gateway here, so programs on Ray read them too.
    extra = {
        **program_metadata(agent, harness, confinement),
        **memory.plan(False, None),
    }
    with command_run(ctx, COMMAND, extra, spec_of=_spec) as current:
        learning, update = memory_opts.stored_memory(current.meta, current.env)
        meta = current.meta
        stored = meta.get(CONFINE_META)
        runner = agent_program(
            meta.get(AGENT_META) or None,
            meta.get(HARNESS_META),
            Confinement.model_validate(stored) if stored is not None else None,
        ).runner(ray=on_ray, told=learning.told if learning is not None else None)
        done = current.roll_out(
            show=not as_json,
            runner=runner,
            memory=learning,
            update=update,
        )
        rows = [
            r for r in current.db.summaries(run=current.run_id) if r["sample_index"] is not None
        ]
        failures = stored_failures(current.db, current.run_id)
    rewards = [r["reward"] for r in rows if r["reward"] is not None]
    statuses = {s.value: sum(r["status"] == s.value for r in rows) for s in OutcomeStatus}
    reward = sum(rewards) / len(rewards) if rewards else None
    if as_json:
        print_json(
            {
                "run_id": current.run_id,
                "store": str(current.db.path),
                "resumed_from": done.resumed,
                "runs": len(rows),
                "status": statuses,
                "rewarded": len(rewards),
                "reward_mean": reward,
            }
        )
        finish(failures, len(rows), "agent runs")
        return
    table = Table(title=f"collect {current.run_id}")
    table.add_column("runs", justify="right")
    for status in statuses:
        table.add_column(status, justify="right")
    table.add_column("mean reward", justify="right")
    table.add_row(
        str(len(rows)),
        *(str(count) for count in statuses.values()),
        "-" if reward is None else f"{reward:.3f}",
    )
    console.print(table)
    console.print(f"stored in {current.db.path} as run {current.run_id}")
    finish(failures, len(rows), "agent runs")


def register(app: typer.Typer) -> None:
    """Add ``trajforge collect``."""
    app.command(COMMAND)(collect)
