"""The rollout engine: every episode is its own coroutine.

Generation requests from all live episodes reach the policy at once, so a policy with dynamic
batching (``HFPolicy``) fills its batches with whatever is ready; tool calls run concurrently, so
a slow tool stalls only its own episode. ``lockstep=True`` runs the synchronous baseline instead
(``trajforge.rollout.lockstep``). Either way every task x sample asked for comes back, finished
trajectories are written to the store as they end, and a run named by ``run_id`` resumes by
running only the (task, sample) pairs the store does not hold yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing, nullcontext
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from trajforge.errors import ConfigError
from trajforge.policy.base import Policy, SamplingParams
from trajforge.rollout.episode import EnvFactory, Episode, EpisodeKey
from trajforge.rollout.limits import Limits
from trajforge.rollout.lockstep import run_lockstep
from trajforge.rollout.progress import RolloutProgress, RolloutStats
from trajforge.rollout.seeding import group_id_for, new_run_id
from trajforge.schema import Task, Trajectory

if TYPE_CHECKING:
    from trajforge.store.sqlite import TrajectoryStore


class RolloutError(ConfigError):
    """A rollout was asked for with arguments it cannot run."""


@dataclass
class RolloutPlan:
    """The episodes a run asks for (in order) and those it still has to run."""

    run_id: str
    keys: list[EpisodeKey]
    todo: list[EpisodeKey]


def plan_rollout(
    tasks: Sequence[Task], n_per_task: int, run_id: str | None, store: TrajectoryStore | None
) -> RolloutPlan:
    """Every task x sample in order, minus the pairs ``store`` already holds for ``run_id``."""
    if n_per_task < 1:
        raise RolloutError(f"n_per_task: must be at least 1, got {n_per_task}")
    seen: dict[str, int] = {}
    for i, task in enumerate(tasks):
        if task.id in seen:
            raise RolloutError(f"tasks[{i}].id: {task.id!r} repeats tasks[{seen[task.id]}].id")
        seen[task.id] = i
    run = run_id or new_run_id()
    keys = [EpisodeKey(i, task, s) for i, task in enumerate(tasks) for s in range(n_per_task)]
    completed = store.completed_keys(run) if store is not None and run_id is not None else set()
    todo = [k for k in keys if k.store_key not in completed]
    return RolloutPlan(run_id=run, keys=keys, todo=todo)


async def _run_async(
    episodes: Sequence[Episode], max_concurrency: int | None
) -> AsyncGenerator[Trajectory, None]:
    """Run every episode as its own task; yield trajectories in the order they finish."""
    queue: asyncio.Queue[Trajectory | BaseException] = asyncio.Queue()
    limiter = asyncio.Semaphore(max_concurrency or max(1, len(episodes)))

    async def drive(ep: Episode) -> None:
        try:
            async with limiter:
                try:
                    await ep.run()
                except asyncio.CancelledError:
                    await ep.abort()
                    raise
                traj = await ep.finish()
        except Exception as exc:  # a bug in the engine itself: surface it instead of hanging
            queue.put_nowait(exc)
            return
        queue.put_nowait(traj)

    tasks = [asyncio.create_task(drive(ep)) for ep in episodes]
    try:
        for _ in tasks:
            item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _run_metadata(
    policy: Policy,
    tasks: Sequence[Task],
    n_per_task: int,
    limits: Limits,
    sampling: SamplingParams,
    seed: int,
    lockstep: bool,
) -> dict[str, object]:
    return {
        "model": policy.name,
        "tasks": len(tasks),
        "n_per_task": n_per_task,
        "limits": limits.model_dump(mode="json"),
        "sampling": asdict(sampling),
        "seed": seed,
        "lockstep": lockstep,
    }


async def _stream(
    plan: RolloutPlan,
    env_factory: EnvFactory,
    policy: Policy,
    tasks: Sequence[Task],
    n_per_task: int,
    limits: Limits,
    sampling: SamplingParams,
    store: TrajectoryStore | None,
    seed: int,
    lockstep: bool,
    progress: bool,
    max_concurrency: int | None,
) -> AsyncGenerator[Trajectory, None]:
    if max_concurrency is not None and max_concurrency < 1:
        raise RolloutError(f"max_concurrency: must be at least 1, got {max_concurrency}")
    if store is not None and store.get_run(plan.run_id) is None:
        meta = _run_metadata(policy, tasks, n_per_task, limits, sampling, seed, lockstep)
        store.set_run(plan.run_id, meta)
    episodes = [
        Episode(
            key,
            env_factory=env_factory,
            policy=policy,
            limits=limits,
            sampling=sampling,
            run_id=plan.run_id,
            group_id=group_id_for(plan.run_id, key.task.id),
            seed=seed,
        )
        for key in plan.todo
    ]
    stats = RolloutStats(total=len(episodes))
    source = (
        run_lockstep(episodes, max_concurrency)
        if lockstep
        else _run_async(episodes, max_concurrency)
    )
    display = RolloutProgress(stats, transient=True) if progress else nullcontext()
    async with aclosing(source) as finished:
        with display:
            async for traj in finished:
                if store is not None:
                    store.add(traj)
                stats.add(traj)
                if isinstance(display, RolloutProgress):
                    display.update()
                yield traj


async def rollout_stream(
    env_factory: EnvFactory,
    policy: Policy,
    tasks: Sequence[Task],
    n_per_task: int = 1,
    limits: Limits | None = None,
    sampling: SamplingParams | None = None,
    store: TrajectoryStore | None = None,
    run_id: str | None = None,
    seed: int = 0,
    lockstep: bool = False,
    progress: bool = True,
    max_concurrency: int | None = None,
) -> AsyncIterator[Trajectory]:
    """Run the episodes and yield each trajectory as it finishes (store first, then yield).

    With ``store`` and a ``run_id`` that already has trajectories, only the missing
    (task, sample) pairs run; the stored ones are not yielded again. Arguments as ``arollout``.
    """
    plan = plan_rollout(tasks, n_per_task, run_id, store)
    stream = _stream(
        plan,
        env_factory,
        policy,
        tasks,
        n_per_task,
        limits or Limits(),
        sampling or SamplingParams(),
        store,
        seed,
        lockstep,
        progress,
        max_concurrency,
    )
    async with aclosing(stream) as finished:
        async for traj in finished:
            yield traj


async def arollout(
    env_factory: EnvFactory,
    policy: Policy,
    tasks: Sequence[Task],
    n_per_task: int = 1,
    limits: Limits | None = None,
    sampling: SamplingParams | None = None,
    store: TrajectoryStore | None = None,
    run_id: str | None = None,
    seed: int = 0,
    lockstep: bool = False,
    progress: bool = True,
    max_concurrency: int | None = None,
) -> list[Trajectory]:
    """Run ``n_per_task`` episodes of every task; return them in task x sample order.

    Args:
        env_factory: Makes a fresh environment per episode.
        policy: Answers the conversations (shared by all episodes; it batches their requests).
        tasks: The tasks; their ids must be distinct.
        n_per_task: Samples per task; they share a ``group_id``.
        limits: Budgets per episode (default ``Limits()``).
        sampling: Base sampling parameters; seeds derive from ``seed``, task, sample and turn.
        store: Where finished trajectories are written as they end.
        run_id: The run's name (default: a fresh id). An existing run in ``store`` resumes.
        seed: The run's seed.
        lockstep: Run the synchronous baseline (turn by turn across a batch) instead.
        progress: Show a progress bar on stderr.
        max_concurrency: Episodes running at once (the lockstep batch size); None: all.

    Returns:
        One trajectory per task x sample, including those a resumed run found in the store.
    """
    plan = plan_rollout(tasks, n_per_task, run_id, store)
    by_key: dict[tuple[str, int], Trajectory] = {}
    if store is not None and len(plan.todo) < len(plan.keys):
        wanted = {k.store_key for k in plan.keys}
        for traj in store.query(run=plan.run_id):
            key = (traj.task.id, traj.sample_index or 0)
            if key in wanted:
                by_key[key] = traj
    stream = _stream(
        plan,
        env_factory,
        policy,
        tasks,
        n_per_task,
        limits or Limits(),
        sampling or SamplingParams(),
        store,
        seed,
        lockstep,
        progress,
        max_concurrency,
    )
    async with aclosing(stream) as finished:
        async for traj in finished:
            by_key[(traj.task.id, traj.sample_index or 0)] = traj
    return [by_key[k.store_key] for k in plan.keys]


def rollout(
    env_factory: EnvFactory,
    policy: Policy,
    tasks: Sequence[Task],
    n_per_task: int = 1,
    limits: Limits | None = None,
    sampling: SamplingParams | None = None,
    store: TrajectoryStore | None = None,
    run_id: str | None = None,
    seed: int = 0,
    lockstep: bool = False,
    progress: bool = True,
    max_concurrency: int | None = None,
) -> list[Trajectory]:
    """Synchronous ``arollout`` (runs its own event loop; call ``arollout`` from async code)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RolloutError(
            "rollout() cannot run inside a running event loop; await arollout() instead"
        )
    return asyncio.run(
        arollout(
            env_factory,
            policy,
            tasks,
            n_per_task,
            limits,
            sampling,
            store,
            run_id,
            seed,
            lockstep,
            progress,
            max_concurrency,
        )
    )
