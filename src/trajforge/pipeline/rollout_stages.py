"""The stages that roll episodes out into the run's store: a teacher's demonstrations and an
agent program's collection, each recorded as its run id's trajectories."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from trajforge.agent_programs import agent_program
from trajforge.distributed import on_ray
from trajforge.pipeline.config import CollectStage, DemonstrationStage, Experiment
from trajforge.rollout import (
    Limits,
    PolicyRef,
    RolloutProgress,
    RolloutSpec,
    Sampling,
    TaskSample,
    run_rollout,
)
from trajforge.schema import Task, Trajectory, is_success


def demonstrations_stage(
    exp: Experiment, stage: DemonstrationStage, teacher: PolicyRef, run_id: str, store: Path,
    tasks: list[Task] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One greedy episode by ``teacher`` per task of ``stage`` (or of ``tasks``, synthesized
    ones), stored as run ``run_id``."""
    spec = RolloutSpec(
        env=exp.env,
        policy=teacher,
        tasks=tasks or TaskSample(count=stage.tasks, split=stage.split, seed=stage.seed),
        limits=Limits(max_turns=stage.max_turns, max_new_tokens=stage.max_new_tokens),
        context=stage.context,
        sampling=Sampling(temperature=0.0),
        seed=stage.seed,
        run_id=run_id,
        store=store,
    )
    live = on_ray(exp.ray)
    live["hooks"] = [RolloutProgress(transient=True)]
    trajectories = run_rollout(spec, **live)
    solved = _solved(trajectories)
    text = f"{len(trajectories)} episodes by {stage.policy}, {solved} solved"
    return {"run_id": run_id, "count": len(trajectories), "solved": solved, "text": text}


def collect_stage(
    exp: Experiment, stage: CollectStage, model: PolicyRef, run_id: str, store: Path
) -> dict[str, Any]:
    """``stage``'s agent program run per task x ``n`` against a gateway serving ``model``,
    stored as run ``run_id``."""
    spec = RolloutSpec(
        env=exp.env,
        policy=model,
        tasks=TaskSample(count=stage.tasks, split=stage.split, seed=stage.seed),
        n=stage.n,
        limits=Limits(episode_timeout_s=stage.timeout_s),
        concurrency=stage.concurrency,
        run_id=run_id,
        store=store,
    )
    played = agent_program(stage.agent, stage.harness, stage.confine)
    # Recorded as trajforge collect records its program: the run's metadata says how it ran.
    played.record(store, run_id, {"spec": spec.model_dump(mode="json")})
    runner = played.runner(ray=exp.ray)
    trajectories = run_rollout(spec, runner=runner, hooks=[RolloutProgress(transient=True)])
    statuses = Counter(t.outcome.status.value for t in trajectories)
    solved = _solved(trajectories)
    counts = ", ".join(f"{n} {name}" for name, n in statuses.most_common())
    text = f"{len(trajectories)} agent runs ({counts}), {solved} solved"
    return {"run_id": run_id, "count": len(trajectories), "solved": solved,
            "statuses": dict(statuses), "text": text}  # fmt: skip


def _solved(trajectories: list[Trajectory]) -> int:
    return sum(1 for t in trajectories if is_success(t.outcome.status, t.outcome.reward))
