"""An ``eval`` stage: the experiment's held-out evaluation (its ``eval`` settings) of some
weights, rolled out into the store and put through the one eval recipe (``judge.evaluation``:
scored by the eval's scorers, summarised, best-of-N selected where the settings ask); an
experience memory where the stage asks for one."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from trajforge.distributed import on_ray
from trajforge.envs import get_env
from trajforge.judge import (
    Evaluation,
    Rubric,
    evaluate,
    format_reward,
    format_scored,
    format_success,
    plan_best_of,
)
from trajforge.memory import Memory, read_with
from trajforge.pipeline.config import Experiment
from trajforge.pipeline.memory_stage import memory_figures
from trajforge.rollout import (
    Limits,
    PolicyRef,
    RolloutProgress,
    RolloutSpec,
    Sampling,
    TaskSample,
    arun_rollout,
)
from trajforge.store import TrajectoryStore


def eval_stage(
    exp: Experiment,
    store_path: Path,
    policy: PolicyRef,
    run_id: str,
    memory: Memory | None = None,
    update: bool = False,
) -> dict[str, Any]:
    """Evaluate ``policy`` as run ``run_id`` of the store at ``store_path``, reading
    ``memory`` (growing it with ``update``); the stage's record, its summary line as ``text``."""
    ev = exp.eval
    rubric = Rubric.from_refs(ev.scorers)
    answer_free = get_env(exp.env).answer_free_verifier
    plan = plan_best_of(exp.env, answer_free, ev.best_of, ev.select, ev.judge_model, ev.temperature)
    n = ev.n if plan is None else plan.n
    spec = RolloutSpec(
        env=exp.env,
        policy=policy,
        tasks=TaskSample(count=ev.tasks, split=ev.split, seed=ev.seed),
        n=n,
        limits=Limits(max_turns=ev.max_turns, max_new_tokens=ev.max_new_tokens),
        context=ev.context,
        sampling=Sampling(temperature=ev.temperature, max_new_tokens=ev.max_new_tokens),
        seed=ev.seed,
        run_id=run_id,
    )
    items_before = len(memory.items) if memory is not None else 0

    async def go() -> Evaluation:
        with TrajectoryStore(store_path) as db:
            live = on_ray(exp.ray)
            grow = read_with(live, memory, update)
            live["store"], live["hooks"] = db, [RolloutProgress(transient=True), *grow]
            trajs = await arun_rollout(spec, **live)
            return await evaluate(trajs, rubric.scorers, store=db, ks=sorted({1, n}), best_of=plan)

    done = asyncio.run(go())
    summary = done.summary
    text = (
        f"success {format_success(summary.success, summary.scored, summary.episodes)}, mean "
        f"reward {format_reward(summary.reward_mean)} (scored "
        f"{format_scored(summary.scored, summary.episodes)})"
    )
    result: dict[str, Any] = {"run_id": run_id, "model": policy.name, "summary": summary.as_dict()}
    if memory is not None:
        run_dir = store_path.parent  # the store lies at the top of the run folder
        result["memory"], said = memory_figures(done.trajectories, memory, items_before, run_dir)
        text += f"; {said}"
    if done.best_of is not None:
        result["best_of"] = done.best_of.as_dict()
        text += "; " + ", ".join(f"{k} {v}" for k, v in done.best_of.rows())
    return {**result, "text": text}
