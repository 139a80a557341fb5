"""Which of an RL step's episodes train, and the figures of those it played: each is scored by
the rubric; the episodes lost to the infrastructure and the stale samples leave their groups (a
group left with fewer than two is skipped); a step none of whose episodes ran stops the run."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trajforge.algos import drop_from_groups
from trajforge.curate import group_key
from trajforge.errors import EpisodeError
from trajforge.judge import Rubric
from trajforge.schema import OutcomeStatus, Role, Trajectory, is_infra_failure, is_success
from trajforge.train.batch import first_loss_message
from trajforge.train.rl.advantages import reward_score


async def score(rubric: Rubric, trajs: Sequence[Trajectory]) -> int:
    """Score each trajectory by ``rubric``: its scorers' scores and their total (the score
    ``episode_reward`` reads) appended to it. Returns how many scores failed (a failed score
    counts 0: a scorer that always fails leaves no signal)."""
    failed = 0
    for t in trajs:
        total, scores = await rubric.evaluate(t)
        t.scores.extend([*scores, reward_score(total)])
        failed += sum(s.value is None for s in scores)
    return failed


def without(
    trajs: Sequence[Trajectory], rows: list[int], out: Sequence[bool], what: str
) -> tuple[list[int], dict[str, float]]:
    """``rows`` less the episodes ``out`` marks and the groups they leave with fewer than two;
    their count (``<what>``) and the groups skipped (``<what>_skipped_groups``)."""
    marked = torch.tensor(list(out), dtype=torch.bool)
    keep, skipped = drop_from_groups([group_key(t) for t in trajs], marked)
    metrics = {what: float(marked.sum()), f"{what}_skipped_groups": float(skipped)}
    return [i for i in rows if keep[i]], metrics


def infra_failures(trajs: Sequence[Trajectory]) -> list[bool]:
    """Which episodes the infrastructure lost."""
    return [is_infra_failure(t) for t in trajs]


def episode_metrics(trajs: Sequence[Trajectory], rewards: Sequence[float]) -> dict[str, float]:
    """The step's reward, success, error and turn figures over every episode it played."""
    reward_t = torch.tensor(rewards, dtype=torch.float32)
    n = len(trajs)
    return {
        "reward_mean": float(reward_t.mean()),
        "reward_std": float(reward_t.std()) if len(rewards) > 1 else 0.0,
        "success_rate": sum(
            is_success(t.outcome.status, r) for t, r in zip(trajs, rewards, strict=True)
        )
        / n,
        "error_rate": sum(t.outcome.status is OutcomeStatus.ERROR for t in trajs) / n,
        "turns_mean": sum(t.num_turns for t in trajs) / n,
        "sampled_tokens": float(sum(assistant_tokens(t)[1] for t in trajs)),
    }


def assistant_tokens(traj: Trajectory) -> tuple[int, int]:
    """``traj``'s assistant tokens that are context only (a tree branch's replayed turns: the
    policy did not sample them here) and those it sampled, as ``first_loss_message`` splits."""
    start = first_loss_message(traj)
    counts = [0, 0]
    for index, m in enumerate(traj.messages):
        if m.role is Role.ASSISTANT:
            counts[index >= start] += len(m.token_ids or ())
    return counts[0], counts[1]


def refuse_all_failed(step: int, trajs: Sequence[Trajectory]) -> None:
    """Stop when no episode of a step ran (an agent program that cannot start, a dead env):
    training on nothing but errors would only look like a run."""
    if trajs and all(t.outcome.status is OutcomeStatus.ERROR for t in trajs):
        error = (trajs[0].outcome.error or "no error text").strip().splitlines()
        raise EpisodeError(
            f"RL step {step}: all {len(trajs)} episodes failed; the first: {error[-1]}"
        )
