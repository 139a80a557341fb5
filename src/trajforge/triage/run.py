"""Triage of a store: every matching trajectory's verdict computed, stored as scores, and
summed into a failure table per run."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from pydantic import BaseModel, ConfigDict

from trajforge.store import TrajectoryFilter, TrajectoryStore
from trajforge.triage.first_error import SCORE_NAME, TriageVerdict, signal_score_name, triage
from trajforge.triage.signals import Signal, TriageOptions

WRITE_BATCH = 500
"""Verdicts written per store transaction."""


def triage_store(
    store: TrajectoryStore,
    where: TrajectoryFilter | None = None,
    options: TriageOptions | None = None,
    *,
    on_verdict: Callable[[TriageVerdict], None] | None = None,
) -> Iterator[TriageVerdict]:
    """Triage every trajectory ``where`` selects, oldest first, storing each verdict as
    scores (replacing an earlier triage); yields the verdicts as they are stored."""
    pending: dict[str, TriageVerdict] = {}

    def flush() -> Iterator[TriageVerdict]:
        store.replace_scores({k: v.scores() for k, v in pending.items()}, SCORE_NAME)
        yield from pending.values()
        pending.clear()

    for traj in store.iter_query(where):
        verdict = triage(traj, options)
        if on_verdict is not None:
            on_verdict(verdict)
        pending[traj.id] = verdict
        if len(pending) >= WRITE_BATCH:
            yield from flush()
    if pending:
        yield from flush()


class RunFailures(BaseModel):
    """One run's row of the failure table: trajectories, those with a policy signal, and how
    many trajectories have each signal."""

    model_config = ConfigDict(extra="forbid")

    run: str
    trajectories: int = 0
    failed: int = 0
    signals: dict[Signal, int] = {}

    def add(self, verdict: TriageVerdict) -> None:
        self.trajectories += 1
        self.failed += int(not verdict.clean)
        for s in verdict.signals:
            self.signals[s] = self.signals.get(s, 0) + 1


def failure_table(verdicts: list[TriageVerdict]) -> list[RunFailures]:
    """The verdicts summed per run (runs in name order; a trajectory of no run under ``""``),
    with an ``all`` row last when there are several runs."""
    rows: dict[str, RunFailures] = {}
    total = RunFailures(run="all")
    for v in verdicts:
        run = v.run_id or ""
        rows.setdefault(run, RunFailures(run=run)).add(v)
        total.add(v)
    ordered = [rows[k] for k in sorted(rows)]
    return [*ordered, total] if len(ordered) > 1 else ordered


def stored_failure_table(
    store: TrajectoryStore, where: TrajectoryFilter | None = None
) -> list[RunFailures]:
    """The failure table of the verdicts already stored, from the score index (no body is
    read): per run, the triaged trajectories, those not clean, and each signal's count."""
    base = where or TrajectoryFilter()
    runs = sorted({r["run_id"] or "" for r in store.summaries(base, score=SCORE_NAME)})
    rows = {run: _stored_row(store, base, run) for run in runs if run}
    everything = _stored_row(store, base, "all")
    if "" in runs:  # the filter cannot ask for "no run": those are the rest of the total
        rows[""] = _rest(everything, list(rows.values()))
    ordered = [rows[k] for k in sorted(rows)]
    return [*ordered, everything] if len(ordered) > 1 else ordered


def _stored_row(store: TrajectoryStore, base: TrajectoryFilter, run: str) -> RunFailures:
    scope = base if run == "all" else base.model_copy(update={"run": run})
    row = RunFailures(
        run=run,
        trajectories=store.count(scope, score=SCORE_NAME),
        failed=store.count(scope, score=SCORE_NAME, max_score=0.0),
    )
    for s in Signal:
        n = store.count(scope, score=signal_score_name(s))
        if n:
            row.signals[s] = n
    return row


def _rest(total: RunFailures, parts: list[RunFailures]) -> RunFailures:
    rest = RunFailures(
        run="",
        trajectories=total.trajectories - sum(p.trajectories for p in parts),
        failed=total.failed - sum(p.failed for p in parts),
    )
    for s, n in total.signals.items():
        left = n - sum(p.signals.get(s, 0) for p in parts)
        if left:
            rest.signals[s] = left
    return rest


def triage_runs(
    store: TrajectoryStore, runs: list[str], options: TriageOptions | None = None
) -> list[RunFailures]:
    """Triage every trajectory of ``runs`` and return their failure table (what a pipeline
    ``triage`` stage records)."""
    verdicts = [v for run in runs for v in triage_store(store, TrajectoryFilter(run=run), options)]
    return failure_table(verdicts)
