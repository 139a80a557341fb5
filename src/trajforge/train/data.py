"""Training data: trajectories from a JSONL file or a store, and scripted-expert SFT sets."""

from __future__ import annotations

from typing import Any, Literal

from trajforge.curate import keep
from trajforge.envs import get_env
from trajforge.errors import DataError
from trajforge.formats import load_trajectories
from trajforge.policy import ScriptedPolicy, bind_expert
from trajforge.rollout import Limits, RolloutProgress, RolloutSpec, TaskSample, run_rollout
from trajforge.schema import Role, Trajectory
from trajforge.store import TrajectoryStore
from trajforge.train.config import DataSource, NonExact


def load_source(src: DataSource) -> list[Trajectory]:
    """Read the configured trajectories and apply the source's filters."""
    runs = [src.run] if isinstance(src.run, str) else src.run
    if src.jsonl is not None:
        if not src.jsonl.exists():
            raise DataError(f"data.jsonl: {src.jsonl} does not exist")
        trajs = list(load_trajectories(src.jsonl))
        trajs = [
            t
            for t in trajs
            if (runs is None or t.run_id in runs) and (src.env is None or t.env == src.env)
        ]
    else:
        assert src.store is not None
        if not src.store.exists():
            raise DataError(f"data.store: {src.store} does not exist")
        with TrajectoryStore(src.store) as store:
            if runs is None:
                trajs = store.query(env=src.env)
            else:
                trajs = [t for run in runs for t in store.query(run=run, env=src.env)]
    trajs = keep(
        trajs,
        status=src.status,
        min_reward=src.min_reward,
        drop_void_turns=src.drop_void_turns,
    )
    trajs = apply_non_exact(trajs, src.non_exact)
    if src.limit is not None:
        trajs = trajs[: src.limit]
    if not trajs:
        where = src.jsonl if src.jsonl is not None else src.store
        raise DataError(f"{where}: no trajectories pass the data filters")
    return trajs


def has_sampled_turn(traj: Trajectory) -> bool:
    """Whether an assistant turn follows the trajectory's rendered prefix (all of it counts
    when the trajectory is exact or the prefix is not known)."""
    start = 0 if traj.exactness.is_exact else traj.exactness.rendered_prefix or 0
    return any(m.role is Role.ASSISTANT for m in traj.messages[start:])


def apply_non_exact(trajs: list[Trajectory], policy: NonExact) -> list[Trajectory]:
    """``trajs`` as ``data.non_exact`` has them: all (``keep``), those with a sampled turn to
    train on (``mask``; ``encode_trajectory(mask_rendered=True)`` masks the rest), or all if
    every one is exact (``refuse``)."""
    if policy is NonExact.KEEP:
        return trajs
    if policy is NonExact.REFUSE:
        for traj in trajs:
            if not traj.exactness.is_exact:
                raise DataError(
                    f"trajectory {traj.id} is {traj.exactness.kind.value} "
                    f"({traj.exactness.reason}) and data.non_exact is refuse "
                    "(mask trains only its sampled turns, keep all of it as text)"
                )
        return trajs
    return [t for t in trajs if has_sampled_turn(t)]


def expert_trajectories(
    env_name: str,
    n: int,
    tokenizer: Any,
    *,
    seed: int = 0,
    split: Literal["train", "test"] = "train",
    max_turns: int = 8,
    progress: bool = False,
) -> list[Trajectory]:
    """Roll out the env's scripted expert on ``n`` tasks with token ids from ``tokenizer``."""
    spec = RolloutSpec(
        env=env_name,
        tasks=TaskSample(count=n, split=split, seed=seed),
        limits=Limits(max_turns=max_turns),
        seed=seed,
    )
    # The expert is passed live: it renders with the caller's tokenizer, not a named one.
    policy = ScriptedPolicy(bind_expert(get_env(env_name).expert), tokenizer)
    hooks = [RolloutProgress(transient=True)] if progress else []
    return run_rollout(spec, policy=policy, hooks=hooks)
