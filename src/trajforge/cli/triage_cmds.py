"""``trajforge triage``: rule signals and the first-error step of every stored trajectory,
stored as scores and summed into a failure table per run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.progress import Progress

from trajforge.cli.common import StoreOption, console, err_console
from trajforge.cli.renamed import OldRubricOption, refuse_renamed
from trajforge.cli.render import fitted_table
from trajforge.cli.store_options import RunFilter, open_store
from trajforge.errors import ConfigError, StoreError
from trajforge.policy import Policy, load_policy
from trajforge.store import TrajectoryFilter, TrajectoryStore
from trajforge.triage import (
    LLMLocaliser,
    LocaliserCriteria,
    RunFailures,
    Signal,
    TriageOptions,
    failure_table,
    locate_unplaced,
    triage_store,
)

if TYPE_CHECKING:
    from rich.console import JustifyMethod

LoopRepeats = Annotated[
    int,
    typer.Option(
        "--loop-repeats", min=2, help="Identical calls with identical results that make a loop."
    ),
]
SlowToolS = Annotated[
    float, typer.Option("--slow-tool-s", min=0.001, help="Seconds after which a tool is slow.")
]


def run_filter(st: TrajectoryStore, run: str | None) -> TrajectoryFilter:
    """The filter of ``--run`` (a run id or a unique prefix); a run the store does not hold is
    an error naming it."""
    if run is None:
        return TrajectoryFilter()
    try:
        return TrajectoryFilter(run=st.resolve_run_id(run))
    except StoreError as exc:
        raise StoreError(f"--run: {exc}") from None


JudgeModelOption = Annotated[
    str | None,
    typer.Option(
        "--judge-model",
        metavar="SPEC",
        help="Ask this policy (embedded, tiny, a model folder or openai:<url>#<model>) where "
        "each failed trajectory the rules place no error in went wrong (score triage_llm).",
    ),
]
CriteriaOption = Annotated[
    str | None,
    typer.Option(
        "--criteria",
        metavar="FILE.yaml",
        help="The localiser's criteria: name, version and instructions (default: built in).",
    ),
]


def triage(
    run: RunFilter = None,
    loop_repeats: LoopRepeats = 3,
    slow_tool_s: SlowToolS = 30.0,
    judge_model: JudgeModelOption = None,
    criteria: CriteriaOption = None,
    rubric: OldRubricOption = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="One JSON object per line per trajectory: id, signals, first_error."
        ),
    ] = False,
    store: StoreOption = None,
) -> None:
    """Find where each trajectory went wrong: rule signals (tool errors, loops, malformed
    calls, truncation, no or wrong answer, ...) and the first-error step, stored as scores
    (`ls --signal loop` finds them) and summed into a failure table per run."""
    options = TriageOptions(loop_repeats=loop_repeats, slow_tool_s=slow_tool_s)
    refuse_renamed("--rubric", "--criteria", rubric, "what the localiser is told")
    if criteria is not None and judge_model is None:
        raise ConfigError("--criteria: give --judge-model too (it is what the localiser is told)")
    localiser_criteria = None if criteria is None else LocaliserCriteria.load(Path(criteria))
    with open_store(store) as st:
        where = run_filter(st, run)
        total = st.count(where)
        verdicts = []
        with Progress(console=err_console, transient=True) as progress:
            bar = progress.add_task("triage", total=total)
            for verdict in triage_store(st, where, options):
                verdicts.append(verdict)
                progress.advance(bar)
        located = {}
        if judge_model is not None:
            localiser = LLMLocaliser(_judge(judge_model), localiser_criteria)
            located = asyncio.run(locate_unplaced(st, verdicts, localiser))
    if not as_json:
        print_failure_table(failure_table(verdicts), total)
        if judge_model is not None:
            placed = sum(1 for s in located.values() if s.dimensions)
            console.print(f"{judge_model} placed {placed} of {len(located)} unplaced failures")
        return
    for verdict in verdicts:
        line: dict[str, Any] = {
            "id": verdict.id,
            "run_id": verdict.run_id,
            "signals": sorted(s.value for s in verdict.signals),
            "first_error": verdict.first_error,
            "counts": {s.value: n for s, n in verdict.signals.items()},
            "details": verdict.details,
        }
        if verdict.id in located:
            score = located[verdict.id]
            step = score.dimensions.get("first_error")
            line["llm_first_error"] = None if step is None else int(step)
            line["llm_reason"] = score.explanation or score.error
        print(json.dumps(line), flush=True)


def _judge(spec: str) -> Policy:
    try:
        return load_policy(spec)
    except ConfigError as exc:
        raise ConfigError(f"--judge-model: {exc}") from None


def print_failure_table(rows: list[RunFailures], total: int) -> None:
    """Per run: trajectories, those with a policy signal, and each signal's trajectories."""
    if not rows:
        console.print("no trajectories to triage")
        return
    present = [s for s in Signal if any(s in r.signals for r in rows)]
    columns: list[tuple[str, JustifyMethod]] = [
        ("run", "left"),
        ("trajectories", "right"),
        ("failed", "right"),
    ]
    columns += [(s.value, "right") for s in present]
    cells = [
        [
            escape(r.run or "-"),
            str(r.trajectories),
            f"{r.failed} ({r.failed / r.trajectories:.0%})" if r.trajectories else "0",
            *(str(r.signals.get(s, 0)) for s in present),
        ]
        for r in rows
    ]
    drop = [s.value for s in reversed(present)]
    table, hidden = fitted_table(console, f"failures of {total} trajectories", columns, cells, drop)
    console.print(table)
    if hidden:
        console.print(f"[dim]left out: {', '.join(hidden)} (--json has all)[/dim]")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command("triage")(triage)
