"""``trajforge run EXPERIMENT.yaml [KEY=VALUE ...]`` and ``trajforge report RUN``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from trajforge.cli import rollout_options as opts
from trajforge.cli.common import (
    NumProcessesOption,
    console,
    launched_as_processes,
    print_json,
    stop_interrupted,
)
from trajforge.cli.failures import Failure, finish, stored_failures
from trajforge.distributed import RayOptions
from trajforge.judge import format_reward, format_scored, format_success
from trajforge.pipeline import STORE_FILE, Experiment, load_experiment
from trajforge.report import REPORT_FILE, build_report, view_command
from trajforge.store import TrajectoryStore
from trajforge.train import TrainingInterrupted, launched_rank


def run_command(
    experiment: Annotated[Path, typer.Argument(help="Experiment YAML (see examples/).")],
    overrides: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="KEY=VALUE",
            help="Set keys over the file's: dotted keys, YAML values, stages by name "
            "(stages.rl.train.steps=3).",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Run folder (default: out_dir/name).")
    ] = None,
    stage: Annotated[str | None, typer.Option("--stage", help="Re-run only this stage.")] = None,
    ray: opts.RayOption = False,
    ray_address: opts.RayAddressOption = None,
    ray_actors: opts.RayActorsOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print results.json at the end.")] = False,
    num_processes: NumProcessesOption = 1,
) -> None:
    """Run a staged experiment (eval, demonstrations, SFT, RL, ...) and write its report."""
    if launched_as_processes(num_processes):
        return
    from trajforge.pipeline import ExperimentRunner  # lazy: its training stages load torch
    from trajforge.train import leave_process_group

    exp = load_experiment(experiment, overrides or [])
    on_ray = opts.ray_options(
        # An experiment whose file has ray: plays on Ray already; the options refine it.
        {"ray": ray or exp.ray is not None, "ray_address": ray_address, "ray_actors": ray_actors}
    )
    if on_ray is not None:  # over the file's ray: settings, as overrides are
        exp = load_experiment(experiment, [*(overrides or []), *_ray_overrides(exp, on_ray)])
    runner = ExperimentRunner(exp, out)
    try:
        results = runner.run(only=stage)
    except TrainingInterrupted as exc:
        # A re-run resumes the stage from its checkpoint (and skips the finished ones).
        again = ["trajforge", "run", str(experiment), *(overrides or [])]
        stop_interrupted(exc, [*again, *(["--out", str(out)] if out else [])])
    leave_process_group()
    if launched_rank() != 0:
        return  # one report per run, from the main process
    failures, episodes = _stage_failures(runner.run_dir / STORE_FILE, results)
    if as_json:
        print_json(results)
        finish(failures, episodes, "episodes or agent runs of the stages")
        return
    table = Table(title=f"{exp.name}: held-out results ({exp.eval.tasks} {exp.env} tasks)")
    for col in ("stage", "success", "mean reward (95% CI)", "scored", "turns", "tool-error rate"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for rec in results["stages"]:
        summary = rec.get("summary")
        if rec.get("kind") != "eval" or not summary:
            continue
        table.add_row(
            rec["name"] + (" (stale)" if rec.get("status") == "stale" else ""),
            format_success(summary["success"], summary["scored"], summary["episodes"]),
            format_reward(
                summary["reward_mean"], summary["reward_ci_low"], summary["reward_ci_high"]
            ),
            format_scored(summary["scored"], summary["episodes"]),
            f"{summary['turns_mean']:.2f}",
            f"{summary['tool_error_rate']:.3f}",
        )
    console.print(table)
    if (final := runner.final_model()) is not None:
        console.print(f"final model: [bold]{escape(final)}[/bold]", soft_wrap=True)
    console.print(runner.disk_use_line(), soft_wrap=True)
    console.print(f"report: [bold]{runner.run_dir / REPORT_FILE}[/bold]")
    console.print(f"browse: [bold]{escape(view_command(runner.run_dir))}[/bold]", soft_wrap=True)
    finish(failures, episodes, "episodes or agent runs of the stages")


def _stage_failures(store: Path, results: dict[str, Any]) -> tuple[list[Failure], int]:
    """The failed episodes (and agent runs) of the stages that roll out, and how many there
    are in all."""
    run_ids = [rec["run_id"] for rec in results["stages"] if rec.get("run_id")]
    if not run_ids or not store.exists():
        return [], 0
    with TrajectoryStore(store, create=False) as db:
        failures = [f for run_id in run_ids for f in stored_failures(db, run_id)]
        return failures, sum(db.count(run=run_id) for run_id in run_ids)


def _ray_overrides(exp: Experiment, asked: RayOptions) -> list[str]:
    """The overrides that make the experiment play on Ray as the options ask, keeping the
    file's other ``ray:`` settings."""
    given = asked.model_dump(exclude_defaults=True)
    if exp.ray is None:
        return [f"ray={json.dumps(given)}"]
    return [f"ray.{key}={json.dumps(value)}" for key, value in given.items()]


def report_command(
    run: Annotated[Path, typer.Argument(help="Run folder (holds results.json and store.db).")],
) -> None:
    """(Re)write a run folder's report.html."""
    console.print(f"report: [bold]{build_report(run)}[/bold]")
    console.print(f"browse: [bold]{escape(view_command(run))}[/bold]", soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add the experiment commands to ``app``."""
    app.command("run")(run_command)
    app.command("report")(report_command)
