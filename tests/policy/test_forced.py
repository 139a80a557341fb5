"""ForcedTurns: a script's replies at the turns it answers, the policy's own at the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajforge.errors import ConfigError
from trajforge.policy.check import check_trajectory
from trajforge.policy.forced import ForcedTurns
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.openai_compat import OpenAIPolicy
from trajforge.rollout import Limits, PolicyRef, RolloutSpec, TaskSample, run_rollout
from trajforge.schema import Role

BAD_CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": [[0]]}}</tool_call>'
SCRIPT = f"""
from trajforge.schema import Role


def first_call_fails(task, messages):
    if any(m.role is Role.ASSISTANT for m in messages):
        return None
    return {BAD_CALL!r}
"""


def test_the_forced_turn_is_the_scripts_and_the_model_plays_on(tmp_path: Path) -> None:
    (tmp_path / "force.py").write_text(SCRIPT)
    spec = RolloutSpec(
        env="calculator",
        policy=PolicyRef(name="tiny", force=f"script:{tmp_path / 'force.py'}:first_call_fails"),
        tasks=TaskSample(count=3, split="test"),
        limits=Limits(max_turns=2, max_new_tokens=40),
    )
    trajectories = run_rollout(spec)
    tokenizer = load_tokenizer()
    for traj in trajectories:
        turns = [m for m in traj.messages if m.role is Role.ASSISTANT]
        assert len(turns) == 2
        forced, sampled = turns
        assert forced.tool_calls[0].arguments == {"expression": [[0]]}
        assert forced.logprobs is None
        tool = next(m for m in traj.messages if m.role is Role.TOOL)
        assert tool.content.startswith("Error:")
        # The model's own turn, sampled after the forced one, carries its logprobs.
        assert sampled.logprobs is not None and len(sampled.logprobs) == len(sampled.token_ids)
        assert traj.model == "tiny"
        assert check_trajectory(traj, tokenizer) == []


def test_an_endpoint_cannot_have_forced_turns() -> None:
    endpoint = OpenAIPolicy("http://127.0.0.1:9/v1", "m")
    with pytest.raises(ConfigError, match="force 'x': forced turns need a policy that samples"):
        ForcedTurns.wrapping(endpoint, lambda task, messages: None, "force 'x'")
