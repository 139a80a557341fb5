"""``trajforge eval``, ``trajforge judge`` and ``trajforge judge-eval``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from trajforge.cli.common import JsonOption, StoreOption, console, print_json, resolve_store_path
from trajforge.errors import ConfigError, StoreError

if TYPE_CHECKING:
    from trajforge.store import TrajectoryStore

ScorerOption = Annotated[
    list[str] | None,
    typer.Option("--scorer", "-s", help="Scorer name (repeatable), e.g. numeric_match, process."),
]


def _open_store(store: Path | None, *, must_exist: bool = True) -> TrajectoryStore:
    from trajforge.store import TrajectoryStore

    path = resolve_store_path(store)
    if must_exist and not path.exists():
        raise StoreError(f"no store at {path} (pass --store or set TRAJFORGE_STORE)")
    return TrajectoryStore(path)


def _summary_table(title: str, summary_dict: dict[str, object]) -> Table:
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in summary_dict.items():
        if isinstance(value, dict):
            value = ", ".join(
                f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}" for k, v in value.items()
            )
        elif isinstance(value, float):
            value = f"{value:.3f}"
        table.add_row(key, str(value))
    return table


def eval_command(
    env: Annotated[str, typer.Option("--env", help="Environment name or module:factory.")],
    model: Annotated[
        str, typer.Option("--model", help="embedded | tiny | expert | HF folder | openai:URL#MODEL")
    ] = "embedded",
    tasks: Annotated[int, typer.Option("--tasks", help="Number of tasks.")] = 16,
    n: Annotated[int, typer.Option("--n", help="Samples per task (for pass@k).")] = 1,
    split: Annotated[str, typer.Option("--split", help="Task split.")] = "test",
    seed: Annotated[int, typer.Option("--seed")] = 0,
    temperature: Annotated[float, typer.Option("--temperature")] = 0.0,
    max_turns: Annotated[int, typer.Option("--max-turns")] = 6,
    scorer: ScorerOption = None,
    run: Annotated[str | None, typer.Option("--run", help="Run id (default: generated).")] = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Roll out a model on an environment's tasks, score, and report reward, pass@k and metrics."""
    from trajforge.envs.registry import get_env
    from trajforge.judge.evaluate import score_into, summarize
    from trajforge.judge.scorer import get_scorer
    from trajforge.policy.base import SamplingParams
    from trajforge.policy.naming import load_policy
    from trajforge.rollout import Limits, rollout
    from trajforge.schema import new_id

    entry = get_env(env)
    scorers = [get_scorer(name) for name in (scorer or ["env_verifier", "process"])]
    policy = load_policy(model, expert=entry.expert)
    task_list = entry.tasks(tasks, seed=seed, split=split)
    run_id = run or f"eval-{new_id()[:8]}"
    with _open_store(store, must_exist=False) as db:
        trajectories = rollout(
            entry.make,
            policy,
            task_list,
            n_per_task=n,
            limits=Limits(max_turns=max_turns),
            sampling=SamplingParams(temperature=temperature, max_new_tokens=256),
            store=db,
            run_id=run_id,
            seed=seed,
            progress=not as_json,
        )
        # Episodes were stored as they finished (a crashed eval resumes); add the verdicts.
        scored = asyncio.run(score_into(db, trajectories, scorers))
        ks = sorted({1, n})
        summary = summarize(scored, ks=ks)
        db.set_run(
            run_id, {"kind": "eval", "env": env, "model": model, "summary": summary.as_dict()}
        )
    if as_json:
        print_json({"run_id": run_id, **summary.as_dict()})
        return
    data = summary.as_dict()
    data["reward_mean"] = (
        f"{summary.reward_mean:.3f} [{summary.reward_ci_low:.3f}, {summary.reward_ci_high:.3f}] (95% CI)"
    )
    data.pop("reward_ci_low")
    data.pop("reward_ci_high")
    console.print(_summary_table(f"eval {env} / {model} (run {run_id})", data))


def judge_command(
    run: Annotated[str, typer.Argument(help="Run id whose trajectories to re-score.")],
    scorer: ScorerOption = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Re-score a stored run's trajectories and store the new scores."""
    from trajforge.judge.evaluate import score_into, summarize
    from trajforge.judge.scorer import get_scorer

    if not scorer:
        raise ConfigError("judge: name at least one --scorer")
    scorers = [get_scorer(name) for name in scorer]
    with _open_store(store) as db:
        trajectories = db.query(run=run)
        if not trajectories:
            raise StoreError(f"run {run!r} has no trajectories in {resolve_store_path(store)}")
        scored = asyncio.run(score_into(db, trajectories, scorers))
    summary = summarize(scored)
    if as_json:
        print_json({"run_id": run, "scores": summary.scores, "episodes": summary.episodes})
    else:
        console.print(
            _summary_table(f"judge {run}", {"episodes": summary.episodes, **summary.scores})
        )


def judge_eval_command(
    labels: Annotated[
        Path, typer.Option("--labels", help="JSONL of {trajectory_id, label, env?}.")
    ],
    scorer: Annotated[
        str, typer.Option("--scorer", "-s", help="Scorer to evaluate.")
    ] = "env_verifier",
    threshold: Annotated[
        float, typer.Option("--threshold", help="Score >= this counts as success.")
    ] = 0.5,
    stored: Annotated[
        bool, typer.Option("--stored", help="Use stored scores instead of re-scoring.")
    ] = False,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Compare a scorer with labels: precision, recall, F1, accuracy, Cohen's kappa (overall, per env)."""
    from trajforge.judge.meta_eval import meta_evaluate, read_labels
    from trajforge.judge.scorer import get_scorer

    label_list = read_labels(labels)
    predictions: dict[str, tuple[float | None, str | None]] = {}
    judge = None if stored else get_scorer(scorer)
    with _open_store(store) as db:
        for lab in label_list:
            try:
                traj = db.get(lab.trajectory_id)
            except StoreError:
                continue
            if judge is None:
                found = traj.score(scorer)
                value = found.value if found else None
            else:
                value = asyncio.run(judge(traj)).value
            predictions[traj.id] = (value, traj.env)
    report = meta_evaluate(scorer, predictions, label_list, threshold=threshold)
    if as_json:
        print_json(report.as_dict())
        return
    table = Table(title=f"judge-eval: {scorer} vs {labels.name} (threshold {threshold})")
    for col in ("slice", "n", "precision", "recall", "F1", "accuracy", "kappa"):
        table.add_column(col, justify="right" if col != "slice" else "left")
    for name, r in [("overall", report.overall), *report.per_env.items()]:
        table.add_row(
            name,
            str(r.n),
            *(f"{v:.3f}" for v in (r.precision, r.recall, r.f1, r.accuracy, r.kappa)),
        )
    console.print(table)
    if report.missing:
        console.print(
            f"[yellow]{len(report.missing)} labelled trajectories not in the store[/yellow]"
        )


def register(app: typer.Typer) -> None:
    """Add the evaluation commands to ``app``."""
    app.command("eval")(eval_command)
    app.command("judge")(judge_command)
    app.command("judge-eval")(judge_eval_command)
