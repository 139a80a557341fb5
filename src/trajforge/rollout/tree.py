"""Tree-structured rollouts: new samples branched from earlier episodes at turn boundaries.

A branch point is a parent episode and a turn boundary inside it (after its ``k``-th assistant
turn, ``1 <= k < turns``). A branch replays the parent's first ``k`` turns token for token
(``policy.ReplayedPrefix``: no sampling, and the decode engine's prefix cache serves the
prefill the parent already computed), the environment steps through them to the parent's state,
and the policy samples from there on. Each branch joins its parent's group, its replayed turns
context only (``loss_from_message``); its first sampled turn starts from the parent's state, so
with an env that names its states (``state_key``) the parent's turn ``k`` and every branch's
form a step-level group, the anchor-state group GiGPO compares. The same step-level comparison
is what "Lookahead Tree-Based Rollouts" and TreeRL (Hou et al. 2025) branch for.

A branch whose replayed context differs from its parent's (an environment that is not
deterministic) is not a branch of that state: it is dropped and counted.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from trajforge.policy import ReplayedPrefix, TokenPolicy, replayed_turns
from trajforge.rollout.engine import run_rollout
from trajforge.rollout.seeding import derive_seed
from trajforge.rollout.spec import RolloutSpec
from trajforge.schema import LOSS_FROM_MESSAGE, Role, Trajectory

BRANCH_OF = "branch_of"
"""Metadata of a branched episode: its parent's trajectory id."""
BRANCH_TURN = "branch_turn"
"""Metadata of a branched episode: the parent's assistant turns it replayed."""


@dataclass(frozen=True)
class BranchPoint:
    """Branch ``parent`` after its first ``turns`` assistant turns."""

    parent: Trajectory
    turns: int


@dataclass
class Branched:
    """A branch rollout's episodes, joined to their parents' groups, and how many were dropped
    because their replayed context was not their parent's."""

    trajectories: list[Trajectory]
    diverged: int


def branch_points(trajs: Sequence[Trajectory], *, seed: int) -> list[BranchPoint]:
    """One branch point per task: a parent drawn among its tokenized episodes of two turns or
    more, and a turn boundary drawn inside it (seeded: the same episodes give the same points)."""
    rng = random.Random(seed)
    by_task: dict[str, list[Trajectory]] = {}
    for t in trajs:
        if t.is_tokenized and t.num_turns >= 2:
            by_task.setdefault(t.task.id, []).append(t)
    points = []
    for task_id in sorted(by_task):
        parent = rng.choice(by_task[task_id])
        points.append(BranchPoint(parent, rng.randint(1, parent.num_turns - 1)))
    return points


def branch_rollout(
    spec: RolloutSpec, policy: TokenPolicy, points: Sequence[BranchPoint], branches: int
) -> Branched:
    """``branches`` new episodes from each of ``points``, rolled out as ``spec`` says (its
    limits, sampling and store; its own run id with ``-branch`` appended and sampling seeds of
    its own)."""
    if not points:
        return Branched([], 0)
    by_task = {p.parent.task.id: p for p in points}
    if len(by_task) != len(points):
        raise ValueError("branch_rollout: one branch point per task (the prefix is the task's)")
    prefixes = {tid: replayed_turns(p.parent.messages, p.turns) for tid, p in by_task.items()}
    run_id = f"{spec.run_id}-branch" if spec.run_id else None
    # Seeds of their own: the spec's would draw sample j's tokens again for branch j.
    seed = derive_seed(spec.seed, BRANCH_OF, 0, 0)
    tasks = [p.parent.task for p in points]
    tree_spec = spec.model_copy(
        update={"tasks": tasks, "n": branches, "run_id": run_id, "seed": seed}
    )
    played = run_rollout(tree_spec, policy=ReplayedPrefix(policy, prefixes))
    joined = [_joined(t, by_task[t.task.id]) for t in played]
    kept = [t for t in joined if t is not None]
    return Branched(kept, len(joined) - len(kept))


def replayed_prefix(traj: Trajectory, turns: int) -> int:
    """The index of ``traj``'s message after its first ``turns`` assistant turns and the
    observations that answered them: where its first sampled turn starts."""
    seen = 0
    for index, m in enumerate(traj.messages):
        if m.role is Role.ASSISTANT:
            if seen == turns:
                return index
            seen += 1
    return len(traj.messages)


def _joined(traj: Trajectory, point: BranchPoint) -> Trajectory | None:
    """``traj`` in its parent's group, its replayed turns context only; ``None`` when its
    context up to its first sampled turn is not the parent's."""
    start = replayed_prefix(traj, point.turns)
    parent_start = replayed_prefix(point.parent, point.turns)
    ours = [list(m.token_ids or ()) for m in traj.messages[:start]]
    theirs = [list(m.token_ids or ()) for m in point.parent.messages[:parent_start]]
    if ours != theirs:
        return None
    metadata = {
        **traj.metadata,
        BRANCH_OF: point.parent.id,
        BRANCH_TURN: point.turns,
        LOSS_FROM_MESSAGE: start,
    }
    return traj.model_copy(update={"group_id": point.parent.group_id, "metadata": metadata})
