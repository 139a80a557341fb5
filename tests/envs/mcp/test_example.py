"""``examples/mcp_env/world_clock.py``, the MCP-backed environment docs/environments.md shows."""

from __future__ import annotations

import json
from pathlib import Path

import psutil

from trajforge.envs.registry import get_env
from trajforge.schema import Message, Role, ToolCall

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mcp_env" / "world_clock.py"


def test_the_docs_show_the_example_whole_in_under_15_lines() -> None:
    text = EXAMPLE.read_text()
    assert len(text.splitlines()) < 15
    assert f"```python\n{text}```" in (EXAMPLE.parents[2] / "docs" / "environments.md").read_text()


async def test_the_example_env_converts_through_the_server_and_verifies() -> None:
    entry = get_env(f"{EXAMPLE}:make_env")
    [task] = [t for t in entry.tasks(10) + entry.tasks(10, split="test") if t.id == "tokyo"]
    env = entry.make()
    try:
        await env.reset(task)
        assert {t.name for t in env.tools} == {"get_current_time", "convert_time"}
        arguments = {
            "source_timezone": "Asia/Tokyo",
            "time": "09:00",
            "target_timezone": "Asia/Dubai",
        }
        call = ToolCall(id="c", name="convert_time", arguments=arguments)
        step = await env.step(Message(role=Role.ASSISTANT, content="", tool_calls=[call]))
        assert json.loads(step.observations[0].content)["target"]["datetime"][11:16] == "04:00"
        final = await env.step(Message(role=Role.ASSISTANT, content="It is 04:00 in Dubai."))
        assert final.done and final.reward == 1.0
    finally:
        await env.close()
    assert psutil.Process().children(recursive=True) == []
