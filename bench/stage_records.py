"""A finished stage's record in an experiment's results, for the benches that run jobs through
``ExperimentRunner`` and read their stages back."""

from __future__ import annotations

from typing import Any

from trajforge.judge.best_of import Rate


def done_record(results: dict[str, Any], name: str) -> dict[str, Any]:
    """Stage ``name``'s record; a stage that did not finish ends the bench with its error."""
    records = [s for s in results["stages"] if s["name"] == name]
    if not records or records[-1].get("status") != "done":
        error = records[-1].get("error") if records else "no such stage"
        raise SystemExit(f"stage {name} did not finish: {error}")
    return dict(records[-1])


def stage_rate(results: dict[str, Any], name: str) -> tuple[Rate, int]:
    """Eval or rollout stage ``name``'s success rate (Wilson 95%) and its episodes."""
    summary = done_record(results, name)["summary"]
    n = int(summary["episodes"])
    return Rate.of(round(float(summary["success"]) * n), n), n
