"""Tree-structured rollouts on the calculator env: branches of the expert's episodes, sampled by
the tiny model, replay their parent's prefix token for token, join its group with the replayed
turns out of the loss, and meet the parent at the branch turn's state (GiGPO's anchor groups);
an RL step with ``tree`` trains on them."""

from __future__ import annotations

from pathlib import Path

import pytest
from train_helpers import small_rl_config, token_id_rubric

from trajforge.algos import compute_advantages
from trajforge.envs.registry import get_env
from trajforge.policy import TokenPolicy
from trajforge.policy.naming import load_policy
from trajforge.rollout import Limits, RolloutSpec, Sampling, run_rollout
from trajforge.rollout.tree import (
    BRANCH_OF,
    BranchPoint,
    branch_points,
    branch_rollout,
    replayed_prefix,
)
from trajforge.schema import Role, Trajectory
from trajforge.train.batch import TokenBatch, encode_trajectory
from trajforge.train.rl import RLTrainer, advantage_input
from trajforge.train.rl.selection import assistant_tokens

pytestmark = pytest.mark.timeout(300)


def _spec(run_id: str) -> RolloutSpec:
    entry = get_env("calculator")
    return RolloutSpec(
        env="calculator",
        tasks=entry.tasks(2, seed=3),
        n=2,
        limits=Limits(max_turns=3, max_new_tokens=64),
        sampling=Sampling(temperature=1.0, max_new_tokens=64),
        seed=5,
        run_id=run_id,
    )


def _expert() -> TokenPolicy:
    expert = get_env("calculator").expert
    policy = load_policy("expert", expert=lambda task, messages: expert(task, messages) if task else None)  # fmt: skip
    assert isinstance(policy, TokenPolicy)
    return policy


@pytest.fixture(scope="module")
def parents() -> list[Trajectory]:
    trajs = run_rollout(_spec("parents"), policy=_expert())
    assert all(t.num_turns >= 2 for t in trajs)  # a tool call, then the answer
    return trajs


def _starts(branch: Trajectory, points: list[BranchPoint]) -> tuple[Trajectory, int, int]:
    """The branch's parent, and where each one's turn after the replayed prefix starts."""
    point = next(p for p in points if p.parent.id == branch.metadata[BRANCH_OF])
    turns = point.turns
    return point.parent, replayed_prefix(branch, turns), replayed_prefix(point.parent, turns)


def test_a_branch_replays_its_parents_prefix_token_for_token(parents: list[Trajectory]) -> None:
    points = branch_points(parents, seed=0)
    assert len(points) == 2 and all(1 <= p.turns < p.parent.num_turns for p in points)
    tree = branch_rollout(_spec("tree"), load_policy("tiny", max_batch_size=8), points, branches=1)
    assert tree.diverged == 0 and len(tree.trajectories) == 2
    for branch in tree.trajectories:
        parent, start, parent_start = _starts(branch, points)
        prefix = [i for m in branch.messages[:start] for i in m.token_ids or ()]
        assert prefix == [i for m in parent.messages[:parent_start] for i in m.token_ids or ()]
        assert branch.group_id == parent.group_id and branch.task.id == parent.task.id
        # The replayed turns are context: only the turns sampled in the branch train.
        seq = encode_trajectory(branch)
        assert not any(seq.loss_mask[: len(prefix)]) and any(seq.loss_mask[len(prefix) :])
        # What the metrics count: the replayed assistant tokens apart from the sampled ones.
        replayed = [m for m in branch.messages[:start] if m.role is Role.ASSISTANT]
        assert assistant_tokens(branch) == (
            sum(len(m.token_ids or ()) for m in replayed),
            seq.num_loss_tokens,
        )


def test_branches_meet_their_parent_at_the_branch_state(parents: list[Trajectory]) -> None:
    answer = load_policy("expert", expert=lambda task, messages: "The answer is 0.")
    points = branch_points(parents, seed=1)
    tree = branch_rollout(_spec("tree-anchor"), answer, points, branches=2)
    assert tree.diverged == 0 and len(tree.trajectories) == 4
    for branch in tree.trajectories:
        parent, start, parent_start = _starts(branch, points)
        assert branch.messages[start].role is Role.ASSISTANT
        assert branch.messages[start].state_key == parent.messages[parent_start].state_key
    # The branch turn's state is shared by the parent and its branches: a step-level group.
    trajs = parents + tree.trajectories
    full = TokenBatch.collate([encode_trajectory(t) for t in trajs])
    adv = compute_advantages("gigpo", advantage_input(trajs, full.token_turn_index))
    assert adv.metrics["anchor_groups"] >= len(points)


def test_a_branch_whose_replayed_context_differs_is_dropped(parents: list[Trajectory]) -> None:
    parent = parents[0]
    tool = next(i for i, m in enumerate(parent.messages) if m.role is Role.TOOL)
    messages = list(parent.messages)
    changed = [*(messages[tool].token_ids or ()), 198]  # an observation the env never gives
    messages[tool] = messages[tool].model_copy(update={"token_ids": changed})
    altered = parent.model_copy(update={"messages": messages})
    tree = branch_rollout(_spec("tree-diverged"), load_policy("tiny"), [BranchPoint(altered, 1)], 2)
    assert tree.trajectories == [] and tree.diverged == 2


def test_an_rl_step_grows_its_groups_by_branches_and_trains_them(tmp_path: Path) -> None:
    cfg = small_rl_config(tmp_path, tree={"branches": 2}, max_turns=3, max_new_tokens=64)
    trainer = RLTrainer(cfg, rubric=token_id_rubric())
    # The step's own episodes: the expert's, two turns or more, so every group has a branch point.
    spec = _spec("step").model_copy(update={"tasks": trainer.tasks})
    played = run_rollout(spec, policy=_expert())
    trainer.rollouts.take = lambda step, next_tasks: (played, 0)  # type: ignore[method-assign]
    [metrics] = trainer.train().history
    assert metrics["branch_points"] == 2 and metrics["branched_episodes"] == 4
    assert metrics["branch_diverged"] == 0
    assert metrics["trained_trajectories"] == len(played) + 4
    # The step's sampling budget: the played episodes' tokens and the branches' sampled ones;
    # the replayed turns (at least one per branch) apart.
    played_tokens = sum(assistant_tokens(t)[1] for t in played)
    assert metrics["sampled_tokens"] > played_tokens and metrics["branch_replayed_tokens"] >= 4
