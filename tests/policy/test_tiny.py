"""The models built from scratch: deterministic weights, their sizes, loading by name and from a
checkpoint, and an end-to-end token-exact episode."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
from policy_doubles import LocalGeneratePolicy

from trajforge.policy.base import SamplingParams
from trajforge.policy.check import check_trajectory
from trajforge.policy.hf import HFPolicy
from trajforge.policy.models.loaders import checkpoint_model
from trajforge.policy.models.tiny import scratch_model_and_tokenizer, tiny_model_and_tokenizer
from trajforge.policy.naming import load_policy
from trajforge.schema import Message, Role, Task, ToolSpec, Trajectory
from trajforge.train.config import ModelSettings
from trajforge.train.model import load_base_model


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


@pytest.mark.parametrize(("name", "low", "high"), [("tiny", 3e6, 4e6), ("pocket", 6e6, 8e6)])
def test_scratch_models_by_name_in_policy_training_and_checkpoints(
    name: str, low: float, high: float, tmp_path: Path
) -> None:
    model, tokenizer = scratch_model_and_tokenizer(name, seed=3)
    assert low < sum(p.numel() for p in model.parameters()) < high
    policy = load_policy(name, seed=3)
    assert isinstance(policy, HFPolicy)
    trained, _ = load_base_model(ModelSettings(spec=name, tiny_seed=3))
    weight = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(trained.state_dict()[weight], model.state_dict()[weight])
    # A checkpoint names its base by spec and seed; loading it rebuilds that model.
    with torch.no_grad():
        trained.model.norm.weight.fill_(2.0)
    torch.save(dict(trained.named_parameters()), tmp_path / "trainable.pt")
    tokenizer.save_pretrained(str(tmp_path))
    base = {"spec": name, "tiny_seed": 3}
    (tmp_path / "state.json").write_text(json.dumps({"base": base, "lora": False}))
    loaded, _ = checkpoint_model(tmp_path)
    assert torch.equal(
        loaded.state_dict()["model.norm.weight"], torch.full((model.config.hidden_size,), 2.0)
    )
    assert torch.equal(loaded.state_dict()[weight], model.state_dict()[weight])


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
