"""``trajforge eval``, ``trajforge judge`` and ``trajforge judge-eval``."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator
from rich.table import Table

from trajforge.cli import rollout_options as opts
from trajforge.cli.best_of import BestOfOption, SelectOption, plan_for_env
from trajforge.cli.command_run import command_run
from trajforge.cli.common import JsonOption, StoreOption, console, print_json, resolve_store_path
from trajforge.cli.failures import finish, scored_failures
from trajforge.cli.memory_cmds import (
    MemoryEmbedOption,
    MemoryKOption,
    MemoryOption,
    MemoryUpdateOption,
    plan_memory,
    stored_memory,
)
from trajforge.cli.preflight import check_reachable
from trajforge.cli.renamed import OldRubricOption, refuse_renamed
from trajforge.errors import ConfigError, DataError, StoreError
from trajforge.judge import (
    BestOf,
    Evaluation,
    LLMJudge,
    Scorer,
    close_scorers,
    evaluate,
    format_rate,
    format_reward,
    format_scored,
    format_success,
    get_scorer,
    load_criteria,
    meta_evaluate,
    read_labels,
    score_all,
    score_into,
    scorer_names,
    summarize,
)
from trajforge.memory import DEFAULT_K
from trajforge.policy import load_policy
from trajforge.precision import Precision
from trajforge.registry import absolute_ref
from trajforge.store import AmbiguousIdError, TrajectoryStore

if TYPE_CHECKING:
    from trajforge.judge import EvalSummary, JudgeCriteria, ScoreSink
    from trajforge.schema import Trajectory

COMMAND = "eval"
DEFAULT_SCORERS = ("env_verifier", "process")
DEFAULT_CRITERIA = "agentrewardbench"
LLM_JUDGE_NAME = "llm_judge"

USER_SCORERS_HELP = "or your own as module:function or file.py:function"
ScorerOption = Annotated[
    list[str] | None,
    typer.Option(
        "--scorer",
        "-s",
        help=f"Scorer (repeatable), one of: {', '.join(scorer_names())}; {USER_SCORERS_HELP}.",
    ),
]
JudgeModelOption = Annotated[
    str | None,
    typer.Option(
        "--judge-model",
        metavar="SPEC",
        help=f"Score with an LLM judge too (its score is named {LLM_JUDGE_NAME}), run by this "
        "policy: embedded, tiny, a model folder or openai:<url>#<model>.",
    ),
]
CriteriaOption = Annotated[
    str | None,
    typer.Option(
        "--criteria",
        metavar="FILE.yaml",
        help=f"What the LLM judge grades: a criteria YAML or JSON file, or a built-in name "
        f"(default: {DEFAULT_CRITERIA}).",
    ),
]
CRITERIA_ARE = "what the LLM judge grades"


def refuse_rubric(value: str | None) -> None:
    """Refuse the old spelling of ``--criteria``."""
    refuse_renamed("--rubric", "--criteria", value, CRITERIA_ARE)


class Judging(BaseModel):
    """Which scorers judge a run; an eval run stores it, so that --resume judges alike."""

    model_config = ConfigDict(extra="forbid")

    scorers: list[str] = list(DEFAULT_SCORERS)
    judge_model: str | None = None
    # Runs stored before the rename keep their "rubric" key and still resume.
    criteria: str | None = Field(default=None, validation_alias=AliasChoices("criteria", "rubric"))

    @field_validator("scorers")
    @classmethod
    def _absolute_files(cls, scorers: list[str]) -> list[str]:
        # A user scorer file is kept by its absolute path, so --resume finds it from anywhere.
        return [absolute_ref(name) for name in scorers]

    def criteria_to_use(self) -> JudgeCriteria | None:
        """What the LLM judge grades, or None without a judge model."""
        if self.judge_model is None:
            if self.criteria is not None:
                raise ConfigError(
                    "--criteria: give --judge-model too (it is what the judge grades)"
                )
            return None
        try:
            return load_criteria(self.criteria or DEFAULT_CRITERIA)
        except ConfigError as exc:
            raise ConfigError(f"--criteria: {exc}") from None

    def check(self) -> None:
        """Refuse unknown scorers and bad criteria before anything runs."""
        for name in self.scorers:
            get_scorer(name)
        self.criteria_to_use()
        check_reachable(self.judge_model, "--judge-model")

    def build(self) -> list[Scorer]:
        """The scorers, with the judge model loaded: call it in the event loop that scores."""
        scorers = [get_scorer(name) for name in self.scorers]
        criteria = self.criteria_to_use()
        if criteria is None or self.judge_model is None:
            return scorers
        try:
            policy = load_policy(self.judge_model)
        except ConfigError as exc:
            raise ConfigError(f"--judge-model: {exc}") from None
        return [*scorers, LLMJudge(criteria, policy, name=LLM_JUDGE_NAME)]


async def _evaluated(
    trajectories: Sequence[Trajectory],
    judging: Judging,
    db: TrajectoryStore,
    ks: Sequence[int],
    plan: BestOf | None,
) -> Evaluation:
    """The eval recipe over a run's stored episodes, with the judge model loaded in its loop."""
    return await evaluate(trajectories, judging.build(), store=db, ks=ks, best_of=plan)


async def _scored(
    trajectories: Sequence[Trajectory], judging: Judging, sink: ScoreSink | None = None
) -> list[Trajectory]:
    """The trajectories with new scores appended (and stored in ``sink`` when given)."""
    scorers = judging.build()
    try:
        if sink is None:
            return await score_all(trajectories, scorers)
        return await score_into(sink, trajectories, scorers)
    finally:
        await close_scorers(scorers)


def _open_store(store: Path | None) -> TrajectoryStore:
    path = resolve_store_path(store)
    if not path.exists():
        raise StoreError(f"no store at {path} (pass --store or set TRAJFORGE_STORE)")
    return TrajectoryStore(path)


def _table(title: str, rows: Sequence[tuple[str, str]]) -> Table:
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in rows:
        table.add_row(name, value)
    return table


def _score_rows(summary: EvalSummary) -> list[tuple[str, str]]:
    return [
        (
            f"score {name}",
            f"{format_reward(summary.scores.get(name))} "
            f"(scored {format_scored(scored, summary.episodes)})",
        )
        for name, scored in summary.scores_scored.items()
    ]


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
        *_score_rows(summary),
    ]


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
    memory: MemoryOption = None,
    memory_k: MemoryKOption = DEFAULT_K,
    memory_update: MemoryUpdateOption = False,
    memory_embed: MemoryEmbedOption = None,
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
    extra |= plan_memory(memory, memory_k, memory_update, on_ray is not None, user, memory_embed)
    # The rollout options reach the run's spec through ctx.params.
    with command_run(ctx, COMMAND, extra) as current:
        if current.resumed:
            judging = Judging.model_validate(current.meta.get("judging", {}))
            if "best_of" in current.meta:
                plan = BestOf.model_validate(current.meta["best_of"])
        learning, update = stored_memory(current.meta, current.env)
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
        console.print(_table(title, [*_eval_rows(done.summary), *best_rows]))
    finish(scored_failures(done.trajectories), len(done.trajectories), "episodes")


def judge_command(
    run: Annotated[
        str, typer.Argument(help="Run id (or a unique prefix) whose trajectories to re-score.")
    ],
    scorer: ScorerOption = None,
    judge_model: JudgeModelOption = None,
    criteria: CriteriaOption = None,
    rubric: OldRubricOption = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Re-score a stored run's trajectories and store the new scores."""
    refuse_rubric(rubric)
    judging = Judging(scorers=scorer or [], judge_model=judge_model, criteria=criteria)
    judging.check()
    if not scorer and judge_model is None:
        raise ConfigError("judge: name at least one --scorer, or a --judge-model")
    with _open_store(store) as db:
        run_id = db.resolve_run_id(run)
        trajectories = db.query(run=run_id)
        if not trajectories:
            raise StoreError(f"run {run_id!r} has no trajectories in {db.path}")
        scored = asyncio.run(_scored(trajectories, judging, db))
    summary = summarize(scored)
    if as_json:
        print_json(
            {
                "run_id": run_id,
                "episodes": summary.episodes,
                "scores": summary.scores,
                "scored": summary.scores_scored,
            }
        )
    else:
        rows = [("episodes", str(summary.episodes)), *_score_rows(summary)]
        console.print(_table(f"judge {run_id}", rows))
    finish(scored_failures(scored, episodes=False), len(scored), "scorings")


def judge_eval_command(
    labels: Annotated[
        Path, typer.Option("--labels", help="JSONL of {trajectory_id, label, env?}.")
    ],
    scorer: Annotated[
        str | None,
        typer.Option(
            "--scorer",
            "-s",
            help=f"Scorer to evaluate (default: env_verifier), one of: "
            f"{', '.join(scorer_names())}; {USER_SCORERS_HELP}.",
        ),
    ] = None,
    judge_model: JudgeModelOption = None,
    criteria: CriteriaOption = None,
    rubric: OldRubricOption = None,
    threshold: Annotated[
        float, typer.Option("--threshold", help="Score >= this counts as success.")
    ] = 0.5,
    stored: Annotated[
        bool, typer.Option("--stored", help="Use stored scores instead of re-scoring.")
    ] = False,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Compare a scorer (or an LLM judge) with labels: precision, recall, F1, accuracy, Cohen's
    kappa (overall, per env)."""
    refuse_rubric(rubric)
    if scorer is not None and judge_model is not None:
        raise ConfigError("--scorer and --judge-model: give one (judge-eval evaluates one scorer)")
    judging = Judging(
        scorers=[] if judge_model else [scorer or "env_verifier"],
        judge_model=judge_model,
        criteria=criteria,
    )
    judging.check()
    # A user scorer's verdicts carry its own name (my_scorers.py:exact_total -> exact_total).
    name = LLM_JUDGE_NAME if judge_model else get_scorer(judging.scorers[0]).name
    label_list = read_labels(labels)
    with _open_store(store) as db:
        # A label may name its trajectory by the short id ``ls`` prints (a unique prefix).
        full_ids = {
            lab.trajectory_id: _stored_id(db, lab.trajectory_id, labels) for lab in label_list
        }
        found = [db.get(i) for i in dict.fromkeys(i for i in full_ids.values() if i is not None)]
        store_path = db.path
    if found and not stored:
        found = asyncio.run(_scored(found, judging))
    verdicts: dict[str, tuple[float | None, str | None]] = {}
    for traj in found:
        verdict = traj.score(name)
        verdicts[traj.id] = (verdict.value if verdict else None, traj.env)
    predictions = {lab: verdicts[full] for lab, full in full_ids.items() if full is not None}
    report = meta_evaluate(name, predictions, label_list, threshold=threshold)
    if report.overall.n == 0:
        raise DataError(
            f"judge-eval: nothing was compared: none of the {len(label_list)} trajectories "
            f"{labels} labels is in {store_path}"
        )
    if as_json:
        print_json(report.as_dict())
        return
    table = Table(title=f"judge-eval: {name} vs {labels.name} (threshold {threshold})")
    for col in ("slice", "n", "precision", "recall", "F1", "accuracy", "kappa"):
        table.add_column(col, justify="right" if col != "slice" else "left")
    for slice_name, r in [("overall", report.overall), *report.per_env.items()]:
        table.add_row(
            slice_name,
            str(r.n),
            *(f"{v:.3f}" for v in (r.precision, r.recall, r.f1, r.accuracy, r.kappa)),
        )
    console.print(table)
    if report.missing:
        console.print(
            f"[yellow]{len(report.missing)} labelled trajectories not in the store[/yellow]"
        )


def _stored_id(db: TrajectoryStore, label_id: str, labels: Path) -> str | None:
    """The stored trajectory a label names by its id or a unique prefix (``None``: none)."""
    try:
        return db.resolve_trajectory_id(label_id)
    except AmbiguousIdError as exc:
        raise DataError(f"{labels}: {exc}") from None
    except StoreError:
        return None


def register(app: typer.Typer) -> None:
    """Add the evaluation commands to ``app``."""
    app.command(COMMAND)(eval_command)
    app.command("judge")(judge_command)
    app.command("judge-eval")(judge_eval_command)
