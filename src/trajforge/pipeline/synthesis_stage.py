"""The ``synthesize`` stage: new training tasks of the experiment's env from exploration, and
the task list a later ``demonstrations`` stage reads from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trajforge.envs import TaskSet
from trajforge.pipeline.config import DemonstrationStage, Experiment, SynthesizeStage
from trajforge.rollout import RolloutProgress
from trajforge.schema import Task
from trajforge.synthesis import synthesize

TASKS_FILE = "tasks.jsonl"


def synthesize_stage(
    exp: Experiment, stage: SynthesizeStage, run_id: str, store: Path, run_dir: Path
) -> dict[str, Any]:
    """Synthesize ``stage``'s tasks into ``<stage>/tasks.jsonl``, the exploration stored as run
    ``run_id``."""
    out = run_dir / stage.name / TASKS_FILE
    hooks = [RolloutProgress(transient=True)]
    report = synthesize(
        stage.env or exp.env, stage, run_id=run_id, store=store, out=out, hooks=hooks
    )
    path = str(out.relative_to(run_dir))
    return {**report.summary(), "path": path, "text": report.text}


def synthesized_tasks(stage: DemonstrationStage, path: Path) -> list[Task]:
    """The tasks a demonstrations stage plays from the task file at ``path``."""
    return list(TaskSet.from_jsonl(path).shuffled(stage.seed).take(stage.tasks))
