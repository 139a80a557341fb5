"""keydoor episodes from the rollout engine, laid out as RL trains on them: the per-turn key
rewards and the state keys reach the estimators, anchor states form across the samples of a
task, and GiGPO moves groups in which GRPO's advantages are all zero."""

from __future__ import annotations

import random

import pytest
import torch

from trajforge.algos import compute_advantages
from trajforge.curate import group_key
from trajforge.envs.builtin import keydoor
from trajforge.envs.builtin.gridworld import MOVES
from trajforge.formats.tool_calls import format_tool_call
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.rollout import Limits, RolloutSpec, run_rollout
from trajforge.schema import Message, Role, Task
from trajforge.train.batch import TokenBatch, encode_trajectory
from trajforge.train.rl import advantage_input

pytestmark = pytest.mark.timeout(120)


def test_gigpo_finds_anchor_states_and_signal_where_grpo_has_none() -> None:
    rng = random.Random(0)

    def noisy_expert(task: Task | None, messages: list[Message]) -> str:
        # The expert's move two times in three, a random move otherwise.
        assert task is not None
        best = keydoor.expert(task, messages)
        if best is not None and rng.random() < 2 / 3:
            return best
        return format_tool_call("move", {"direction": rng.choice(list(MOVES))})

    policy = ScriptedPolicy(noisy_expert, load_tokenizer(), name="noisy-expert")
    spec = RolloutSpec(
        env="keydoor",
        tasks=keydoor.generate_tasks(6, seed=3),
        n=6,
        limits=Limits(max_turns=10),
        concurrency=1,  # the replies draw from one generator: a fixed order keeps them fixed
    )
    trajs = run_rollout(spec, policy=policy)
    rewards = torch.tensor([t.outcome.reward or 0.0 for t in trajs])
    batch = TokenBatch.collate([encode_trajectory(t) for t in trajs])
    inp = advantage_input(trajs, batch.token_turn_index)
    assert torch.equal(inp.rewards, rewards)  # unscored: the outcome reward

    keys_taken = [
        sum(m.reward or 0.0 for m in t.messages if m.role is Role.ASSISTANT) for t in trajs
    ]
    assert any(k > 0 for k in keys_taken) and (inp.turn_rewards > 0).any()
    assert all(key is not None for row in inp.state_keys for key in row[:-1])

    grpo = compute_advantages("grpo", inp).turn_advantages
    gigpo_out = compute_advantages("gigpo", inp, gamma=0.95)
    gigpo = gigpo_out.turn_advantages
    assert gigpo_out.metrics["anchor_step_frac"] >= 0.3

    groups: dict[str, list[int]] = {}
    for row, t in enumerate(trajs):
        groups.setdefault(group_key(t), []).append(row)
    silent = [rows for rows in groups.values() if bool((grpo[rows] == 0).all())]
    assert silent, "some task's samples all scored the same"
    assert any(bool((gigpo[rows] != 0).any()) for rows in silent)
