"""The reward RL trains an episode on and the estimators' input built from a step's episodes.

One figure, ``episode_reward``: the total of the rubric the trainer scored the episode with,
recorded on it as the score named ``reward`` (``reward_score``), or, for an episode no rubric
scored (one read back from a store, say), the env's verdict ``outcome.reward``, which is what
the default rubric (``env_verifier``) totals to; 0 when there is neither. The trainer and the
viewer's group page both build their ``AdvantageInput`` with ``advantage_input`` from it.

Importing this module loads torch but not the trainer: the viewer imports it on its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trajforge.algos import AdvantageInput
from trajforge.curate import group_key
from trajforge.schema import Evaluator, EvaluatorKind, Message, Role, Score, Trajectory

REWARD = "reward"
"""The name of the score that holds the rubric total an episode was trained on."""


def reward_score(total: float) -> Score:
    """The score that records ``total``, an episode's rubric total, on the episode."""
    evaluator = Evaluator(kind=EvaluatorKind.METRIC, name=REWARD)
    return Score(name=REWARD, value=total, evaluator=evaluator, explanation="the RL reward")


def episode_reward(traj: Trajectory) -> float:
    """The reward ``traj`` is trained on: its recorded rubric total, else its outcome reward,
    else 0 (an unscored episode, or a failed score, counts 0)."""
    for score in reversed(traj.scores):
        if score.name == REWARD:
            return float(score.value or 0.0)
    return float(traj.outcome.reward or 0.0)


def advantage_input(
    trajs: Sequence[Trajectory],
    token_turn_index: torch.Tensor | None = None,
    turns: Sequence[Sequence[Message]] | None = None,
) -> AdvantageInput:
    """The estimators' input for ``trajs``: their ``episode_reward``, per-turn rewards and state
    keys, and each context token's assistant turn (-1 off the assistant turns).

    Args:
        trajs: One row each.
        token_turn_index: ``[B, T]`` turn of each token, laid out like the training batch
            (``TokenBatch.token_turn_index``); ``None``: laid out from the messages' token ids,
            a message without ids standing for one position (a stored, untokenized episode).
        turns: Each row's assistant turns (``None``: its trajectory's assistant messages; an
            episode in segments has those of all its segments, ``train.rl.segments``).
    """
    if turns is None:
        turns = [[m for m in t.messages if m.role is Role.ASSISTANT] for t in trajs]
    k = max([1, *(len(a) for a in turns)])
    turn_rewards = torch.zeros((len(trajs), k))
    turn_mask = torch.zeros((len(trajs), k), dtype=torch.bool)
    for b, assistant in enumerate(turns):
        for j, m in enumerate(assistant):
            turn_mask[b, j] = True
            turn_rewards[b, j] = m.reward or 0.0
    return AdvantageInput(
        rewards=torch.tensor([episode_reward(t) for t in trajs], dtype=torch.float32),
        group_ids=[group_key(t) for t in trajs],
        turn_rewards=turn_rewards,
        turn_mask=turn_mask,
        state_keys=[[m.state_key for m in a] for a in turns],
        token_turn_index=token_turn_index if token_turn_index is not None else _turn_index(trajs),
    )


def _turn_index(trajs: Sequence[Trajectory]) -> torch.Tensor:
    """Each token's assistant turn as ``encode_trajectory`` lays it out, without its checks."""
    rows: list[list[int]] = []
    for traj in trajs:
        row: list[int] = []
        turn = 0
        for msg in traj.messages:
            sampled = msg.role is Role.ASSISTANT
            width = len(msg.token_ids) if msg.token_ids is not None else 1
            row.extend([turn if sampled else -1] * width)
            turn += sampled
        rows.append(row)
    length = max([1, *(len(r) for r in rows)])
    index = torch.full((len(trajs), length), -1, dtype=torch.long)
    for b, row in enumerate(rows):
        index[b, : len(row)] = torch.tensor(row, dtype=torch.long)
    return index
