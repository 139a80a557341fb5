"""``trajforge eval``: roll out a model on an environment's tasks, score them and report."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from trajforge.cli import memory_options as memory_opts
from trajforge.cli import rollout_options as opts
from trajforge.cli.best_of import BestOfOption, SelectOption, plan_for_env
from trajforge.cli.command_run import command_run
from trajforge.cli.common import JsonOption, StoreOption, console, metric_table, print_json
from trajforge.cli.failures import finish, scored_failures
from trajforge.cli.judging import (
    DEFAULT_SCORERS,
    CriteriaOption,
    JudgeModelOption,
    Judging,
    ScorerOption,
    refuse_rubric,
    score_rows,
)
from trajforge.cli.renamed import OldRubricOption
from trajforge.errors import ConfigError
from trajforge.judge import (
    BestOf,
    Evaluation,
    evaluate,
    format_rate,
    format_reward,
    format_scored,
    format_success,
)
from trajforge.precision import Precision
from trajforge.store import TrajectoryStore

if TYPE_CHECKING:
    from trajforge.judge import EvalSummary
    from trajforge.schema import Trajectory

COMMAND = "eval"


async def _evaluated(
    trajectories: Sequence[Trajectory],
    judging: Judging,
    db: TrajectoryStore,
    ks: Sequence[int],
    plan: BestOf | None,
) -> Evaluation:
    """The eval recipe over a run's stored episodes, with the judge model loaded in its loop."""
    return await evaluate(trajectories, judging.build(), store=db, ks=ks, best_of=plan)


def _eval_rows(summary: EvalSummary) -> list[tuple[str, str]]:
    reward = format_reward(summary.reward_mean, summary.reward_ci_low, summary.reward_ci_high)
    return [
        ("episodes", str(summary.episodes)),
        ("tasks", str(summary.tasks)),
        ("success", format_success(summary.success, summary.scored, summary.episodes)),
        ("mean reward (95% CI)", reward),
        ("scored", format_scored(summary.scored, summary.episodes)),
        *((f"pass@{k}", format_rate(v)) for k, v in summary.pass_at.items()),
        *((f"pass^{k}", format_rate(v)) for k, v in summary.pass_hat.items() if k > 1),
        ("turns", f"{summary.turns_mean:.2f}"),
        ("tokens", f"{summary.tokens_mean:.1f}"),
        ("tool-error rate", f"{summary.tool_error_rate:.3f}"),
        ("invalid tool-call rate", f"{summary.invalid_tool_call_rate:.3f}"),
        ("status", ", ".join(f"{k}: {v}" for k, v in sorted(summary.status.items()))),
        *score_rows(summary),
    ]


@memory_opts.memory_options
def eval_command(
    ctx: typer.Context,
    env: opts.EnvOption = "calculator",
    model: opts.ModelOption = "embedded",
    user: opts.UserOption = None,
    tasks: opts.TasksOption = 16,
    n: opts.NOption = 1,
    split: opts.SplitOption = "test",
    seed: opts.SeedOption = 0,
    temperature: opts.TemperatureOption = 0.0,
    max_turns: opts.MaxTurnsOption = None,
    max_new_tokens: opts.MaxNewTokensOption = 256,
    batch_size: opts.BatchSizeOption = 16,
    concurrency: opts.ConcurrencyOption = None,
    precision: opts.PrecisionOption = Precision.AUTO,
    scorer: ScorerOption = None,
    judge_model: JudgeModelOption = None,
    criteria: CriteriaOption = None,
    rubric: OldRubricOption = None,
    best_of: BestOfOption = None,
    select: SelectOption = None,
    run: opts.RunOption = None,
    resume: opts.ResumeOption = None,
    store: StoreOption = None,
    memory: memory_opts.MemoryOptions = memory_opts.NO_MEMORY,
    ray: opts.RayOption = False,
    ray_address: opts.RayAddressOption = None,
    ray_actors: opts.RayActorsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Roll out a model on an environment's tasks, score them, and report success, mean reward,
    pass@k, pass^k (all k samples succeed) and process metrics.

    With --best-of N --select SELECTOR, N candidates per task and one kept without reading the
    answer key: pass@1, pass@N and selected@N with 95% intervals.

    Defaults that differ from rollout's: greedy (--temperature 0), the test split.
    Ctrl-C stops the run; --resume finishes it.
    """
    refuse_rubric(rubric)
    # A criteria file is stored by its absolute path, so --resume finds it from anywhere.
    criteria_ref = (
        str(Path(criteria).absolute()) if criteria and Path(criteria).suffix else criteria
    )
    judging = Judging(
        scorers=list(scorer or DEFAULT_SCORERS), judge_model=judge_model, criteria=criteria_ref
    )
    plan: BestOf | None = None
    if resume is None:  # a fresh run's scorers are checked before the store is opened
        judging.check()
        plan = plan_for_env(env, best_of, select, judge_model, temperature)
        if plan is not None:
            if n != 1:
                raise ConfigError("--best-of and --n: give one (--best-of N samples N per task)")
            ctx.params["n"] = plan.n
    extra = {"kind": "eval", "judging": judging.model_dump(mode="json")}
    if plan is not None:
        extra["best_of"] = plan.model_dump(mode="json")
    on_ray = opts.ray_options(ctx.params)
    extra |= memory.plan(on_ray is not None, user)
    # The rollout options reach the run's spec through ctx.params.
    with command_run(ctx, COMMAND, extra) as current:
        if current.resumed:
            judging = Judging.model_validate(current.meta.get("judging", {}))
            if "best_of" in current.meta:
                plan = BestOf.model_validate(current.meta["best_of"])
        learning, update = memory_opts.stored_memory(current.meta, current.env)
        current.roll_out(show=not as_json, ray=on_ray, memory=learning, update=update)
        # Every episode is stored; an interrupted scoring resumes where it stopped.
        trajectories = current.db.query(run=current.run_id, order_by="task_id")
        ks = sorted({1, current.spec.n})
        done = asyncio.run(_evaluated(trajectories, judging, current.db, ks, plan))
        result = done.as_dict()
        current.db.set_run(current.run_id, {**current.meta, "summary": result})
    if as_json:
        print_json({"run_id": current.run_id, **result})
    else:
        title = f"eval {current.env} / {current.model} (run {current.run_id})"
        best_rows = done.best_of.rows() if done.best_of is not None else []
        console.print(metric_table(title, [*_eval_rows(done.summary), *best_rows]))
    finish(scored_failures(done.trajectories), len(done.trajectories), "episodes")


def register(app: typer.Typer) -> None:
    """Add ``trajforge eval`` to ``app``."""
    app.command(COMMAND)(eval_command)
