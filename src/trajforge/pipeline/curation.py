"""The stages that judge and curate stored trajectories without a model: triage (rule
signals and first-error steps stored as scores, a failure table per run) and repair (Agent-R
revision trajectories stored as a new run). Each takes run ids and returns its stage record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trajforge.curate import repair_run
from trajforge.errors import ConfigError
from trajforge.pipeline.config import TriageStage
from trajforge.policy import ChatRenderer, tokenizer_for
from trajforge.store import TrajectoryFilter, TrajectoryStore
from trajforge.triage import TriageOptions, triage_runs


def triage_stage(store_path: Path, stage: TriageStage, runs: list[str]) -> dict[str, Any]:
    """Triage every trajectory of ``runs``; the record holds the failure table."""
    options = TriageOptions(loop_repeats=stage.loop_repeats, slow_tool_s=stage.slow_tool_s)
    with TrajectoryStore(store_path) as db:
        table = triage_runs(db, runs, options)
    total = sum(r.trajectories for r in table if r.run != "all")
    failed = sum(r.failed for r in table if r.run != "all")
    text = f"{total} trajectories of {len(runs)} run(s) triaged, {failed} with a policy signal"
    return {"runs": runs, "failures": [r.model_dump(mode="json") for r in table], "text": text}


def repair_stage(
    store_path: Path, model: str, failed_run: str, good_run: str | None, run_id: str
) -> dict[str, Any]:
    """Repair the failures of ``failed_run`` with successful episodes of ``good_run`` (or of
    any run), stored as ``run_id``; the note is encoded with ``model``'s tokenizer."""
    tokenizer = tokenizer_for(model)
    if tokenizer is None:
        raise ConfigError(f"model {model!r} has no local tokenizer to encode repair notes with")
    with TrajectoryStore(store_path) as db:
        # Repairs are stored all at once, so a run id that holds some is an attempt that
        # stopped after storing them: they are its output.
        if stored := db.count(run=run_id):
            text = f"{stored} repair trajectories, stored by the interrupted attempt"
            return {"run_id": run_id, "count": stored, "skipped": {}, "text": text}
        made = repair_run(
            db, TrajectoryFilter(run=failed_run), good_run, run_id, ChatRenderer(tokenizer)
        )
    skipped = dict(made.skipped)
    text = f"{len(made.built)} repair trajectories from {failed_run}"
    if skipped:
        text += f", {sum(skipped.values())} failures skipped"
    return {"run_id": run_id, "count": len(made.built), "skipped": skipped, "text": text}
