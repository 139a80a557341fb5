"""On keydoor episodes that all fail, GRPO has no signal while turn-level returns and GiGPO's
anchor states tell the moves that fetched the key sooner from the others."""

from __future__ import annotations

import torch

from episodes import play, reward, state_keys
from trajforge.algos import AdvantageInput, compute_advantages
from trajforge.envs.builtin import keydoor
from trajforge.formats.tool_calls import format_tool_call
from trajforge.schema import Message, Role, Task

# S . a      the key two moves right of the start, door A below it, the goal bottom left
# # # A      (6 moves): four moves and a stop never win, so every outcome is 0.
# G . .
HAND = Task(id="hand", prompt="Reach G.", data={"rows": ["S.a", "##A", "G.."]})
PLANS = [
    ["right", "right", "down", "down"],  # the key at turn 1
    ["right", "left", "right", "left"],  # never the key
    ["down", "right", "right", "left"],  # a wall first (same state again), the key at turn 2
    ["right", "left", "right", "right"],  # the key at turn 3
]


def episode_rows(plan: list[str]) -> tuple[list[float], list[str | None]]:
    """Per-turn rewards as the rollout engine stores them (none on the final turn) and the
    state keys, for ``plan`` then a reply without a tool call."""

    def reply(task: Task, messages: list[Message]) -> str:
        turn = sum(1 for m in messages if m.role is Role.ASSISTANT)
        return format_tool_call("move", {"direction": plan[turn]}) if turn < len(plan) else "Stop."

    episode = play(keydoor.make_env, HAND, reply)
    assert reward(episode) == 0.0
    turns = [m for m in episode.messages if m.role is Role.ASSISTANT]
    assert turns[-1].reward is None
    rewards = [m.reward or 0.0 for m in turns[:-1]] + [0.0]
    return rewards, state_keys(episode)


def batch() -> AdvantageInput:
    rows = [episode_rows(plan) for plan in PLANS]
    k = len(rows[0][0])
    return AdvantageInput(
        rewards=torch.zeros(len(PLANS)),
        group_ids=["hand"] * len(PLANS),
        turn_rewards=torch.tensor([r for r, _ in rows]),
        turn_mask=torch.ones((len(PLANS), k), dtype=torch.bool),
        state_keys=[keys for _, keys in rows],
        token_turn_index=torch.arange(k).repeat(len(PLANS), 1),
    )


def test_grpo_sees_nothing_where_turn_returns_and_gigpo_rank_the_moves() -> None:
    inp = batch()
    key = keydoor.KEY_REWARD
    expected = [[0, key, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, key, 0, 0], [0, 0, 0, key, 0]]
    assert torch.allclose(inp.turn_rewards, torch.tensor(expected))
    assert bool((compute_advantages("grpo", inp).turn_advantages == 0).all())

    turn = compute_advantages("turn_returns", inp, gamma=0.95).turn_advantages
    assert turn[0, 0] > turn[2, 0] > turn[3, 0] > turn[1, 0]

    out = compute_advantages("gigpo", inp, gamma=0.95)
    # The start state is shared by all four episodes (twice by the wall bumper).
    assert out.metrics["anchor_groups"] >= 2
    adv = out.turn_advantages
    # At the start, "right" then the key at once beats bumping the wall, which beats
    # wandering off and never taking the key.
    assert adv[0, 0] > adv[2, 0] > adv[1, 0]
    assert adv[2, 0] < adv[2, 1]  # from the same state, the wall bump is worse than "right"
