"""``examples/openenv/reverse_env.py``, the OpenEnv environment docs/openenv.md shows, rolled
out by trajforge's engine through ``openenv:``."""

from __future__ import annotations

from pathlib import Path

import psutil

from trajforge.envs.openenv.source import OpenEnvEntry
from trajforge.envs.registry import get_env
from trajforge.formats.tool_calls import format_tool_call
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.rollout.engine import arun_rollout
from trajforge.rollout.spec import RolloutSpec, TaskSample
from trajforge.schema import Message, OutcomeStatus, Role, Task

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "openenv" / "reverse_env.py"
ENV = f"openenv:{EXAMPLE}:ReverseEnvironment"


def test_the_docs_show_the_example_whole_in_about_15_lines() -> None:
    text = EXAMPLE.read_text()
    assert len(text.splitlines()) < 20
    assert f"```python\n{text}```" in (EXAMPLE.parents[2] / "docs" / "openenv.md").read_text()


def _backwards(task: Task | None, messages: list[Message]) -> str:
    """Reverse the word the opening observation names, whatever the reward says."""
    word = messages[1].content.split("'")[1]
    if task is not None and task.data["seed"] % 2:
        word = word[::-1]  # every other task answered wrong, spelled forwards
    return format_tool_call("reply", {"word": word[::-1]})


async def test_trajforge_rolls_out_the_example_and_rewards_come_from_openenv() -> None:
    entry = get_env(ENV)
    assert isinstance(entry, OpenEnvEntry)
    policy = ScriptedPolicy(_backwards, load_tokenizer(), name="backwards")
    spec = RolloutSpec(env=ENV, tasks=TaskSample(count=4), concurrency=4)
    try:
        trajectories = await arun_rollout(spec, policy=policy)
    finally:
        get_env.cache_clear()
        entry.server.stop()
    assert psutil.Process().children(recursive=True) == []
    assert [t.outcome.status for t in trajectories] == [OutcomeStatus.OK] * 4
    rewards = {t.task.data["seed"]: t.outcome.reward for t in trajectories}
    assert rewards == {0: 1.0, 1: 0.0, 2: 1.0, 3: 0.0}
    first = trajectories[0]
    assert [m.role for m in first.messages] == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL]
    assert first.messages[1].content == "Spell the word 'openenv' backwards."
    assert [t.name for t in first.tools] == ["reply"]
