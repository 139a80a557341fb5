"""``trajforge judge`` (re-score a stored run) and ``trajforge judge-eval`` (a scorer against
labels)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from trajforge.cli.common import (
    JsonOption,
    StoreOption,
    console,
    existing_store_path,
    metric_table,
    print_json,
)
from trajforge.cli.failures import finish, scored_failures
from trajforge.cli.judging import (
    LLM_JUDGE_NAME,
    USER_SCORERS_HELP,
    CriteriaOption,
    JudgeModelOption,
    Judging,
    ScorerOption,
    refuse_rubric,
    score_rows,
    score_trajectories,
)
from trajforge.cli.renamed import OldRubricOption
from trajforge.errors import ConfigError, DataError, StoreError
from trajforge.judge import get_scorer, meta_evaluate, read_labels, scorer_names, summarize
from trajforge.store import AmbiguousIdError, TrajectoryStore


def _open_store(store: Path | None) -> TrajectoryStore:
    return TrajectoryStore(existing_store_path(store))


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
        scored = asyncio.run(score_trajectories(trajectories, judging, db))
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
        rows = [("episodes", str(summary.episodes)), *score_rows(summary)]
        console.print(metric_table(f"judge {run_id}", rows))
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
        found = asyncio.run(score_trajectories(found, judging))
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
    """Add ``trajforge judge`` and ``trajforge judge-eval`` to ``app``."""
    app.command("judge")(judge_command)
    app.command("judge-eval")(judge_eval_command)
