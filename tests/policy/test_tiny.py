"""The tiny random model: deterministic weights, and an end-to-end token-exact episode."""

from __future__ import annotations

import asyncio

import pytest
import torch
from policy_doubles import LocalGeneratePolicy

from trajforge.policy.base import SamplingParams
from trajforge.policy.check import check_trajectory
from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.schema import Message, Role, Task, ToolSpec, Trajectory


def test_seeded_weights_copies_and_rng() -> None:
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a, tokenizer = tiny_model_and_tokenizer(seed=0)
    assert torch.equal(torch.rand(1), expected_next)  # the caller's RNG stream is untouched
    b, _ = tiny_model_and_tokenizer(seed=0)
    c, _ = tiny_model_and_tokenizer(seed=1)
    assert a is not b
    weight = "model.embed_tokens.weight"
    assert torch.equal(a.state_dict()[weight], b.state_dict()[weight])
    assert not torch.equal(a.state_dict()[weight], c.state_dict()[weight])
    with torch.no_grad():
        a.model.embed_tokens.weight.zero_()
    assert not torch.equal(a.state_dict()[weight], b.state_dict()[weight])
    assert a.config.vocab_size == len(tokenizer) == 49152
    assert tokenizer.eos_token == "<|im_end|>" and "<|im_start|>" in tokenizer.chat_template


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tiny_model_episode_is_token_exact(
    seed: int, tools: list[ToolSpec], opening: list[Message]
) -> None:
    model, tokenizer = tiny_model_and_tokenizer(seed=seed)
    policy = LocalGeneratePolicy(model, tokenizer, name="tiny")
    task = Task(id="t", prompt=opening[1].content)

    async def episode() -> list[Message]:
        session = policy.start_session(opening, tools, task=task)
        for turn in range(3):
            sampling = SamplingParams(temperature=1.0, max_new_tokens=16, seed=10 * seed + turn)
            message = await policy.respond(session, sampling, turn=turn)
            if message.tool_calls:
                session.add_observations(
                    [
                        Message(role=Role.TOOL, content="error: unknown", tool_call_id=c.id)
                        for c in message.tool_calls
                    ]
                )
            else:
                session.add_observations([Message(role=Role.USER, content=f"Turn {turn} done.")])
        return session.messages

    messages = asyncio.run(episode())
    context = [t for m in messages for t in m.token_ids or []]
    position = 0
    for i, m in enumerate(messages):
        if m.role is Role.ASSISTANT:
            prompt = policy.prompts.pop(0)
            assert prompt == context[:position]  # the model saw exactly the stored prefix
            assert m.logprobs is not None and len(m.logprobs) == len(m.token_ids or [])
            assert all(lp <= 0.0 for lp in m.logprobs)
        position += len(m.token_ids or [])
        assert i == 0 or m.token_ids
    traj = Trajectory(task=task, tools=tools, messages=messages, model="tiny")
    assert check_trajectory(traj, tokenizer) == []
