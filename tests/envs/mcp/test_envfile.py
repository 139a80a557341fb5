"""Env files: an MCP-backed environment written as YAML, found wherever an env is named."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from trajforge.envs.mcp import close_shared
from trajforge.envs.registry import get_env
from trajforge.errors import ConfigError
from trajforge.schema import Message, Role, ToolCall

ENV_YAML = """\
name: world-clock
description: Clock times between timezones, from the MCP time server.
system_prompt: Use the tools; end with HH:MM.
servers:
  - name: time
    command: python
    args: [-m, mcp_server_time, --local-timezone, UTC]
    scope: shared
    tools: {include: [convert_time], rename: {convert_time: convert}}
tools: [helpers.py:shout]
tasks: tasks.jsonl
verifier: helpers.py:verify
max_turns: 3
"""

HELPERS = '''
def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()


def verify(evidence):
    return 1.0 if evidence.task.answer in evidence.messages[-1].content else 0.0


def old_verify(task, messages):
    return 1.0
'''


def write_env(folder: Path, env_yaml: str = ENV_YAML) -> Path:
    (folder / "helpers.py").write_text(HELPERS)
    tasks = [
        {"id": f"t{i}", "prompt": "Tokyo 09:00 in Dubai?", "answer": "04:00"} for i in range(5)
    ]
    (folder / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    path = folder / "env.yaml"
    path.write_text(env_yaml)
    return path


async def test_an_env_file_offers_its_servers_and_local_tools_and_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_env(tmp_path)
    monkeypatch.chdir("/")  # relative paths are read from the file's folder
    entry = get_env(str(path))
    assert entry.description == "Clock times between timezones, from the MCP time server."
    assert len(entry.tasks(10)) + len(entry.tasks(10, split="test")) == 5
    env = entry.make()
    try:
        await env.reset(entry.tasks(1)[0])
        assert env.name == "world-clock" and env.max_turns == 3
        assert [t.name for t in env.tools] == ["shout", "convert"]
        arguments = {
            "source_timezone": "Asia/Tokyo",
            "time": "09:00",
            "target_timezone": "Asia/Dubai",
        }
        calls = [
            ToolCall(id="a", name="convert", arguments=arguments),
            ToolCall(id="b", name="shout", arguments={"text": "hi"}),
        ]
        step = await env.step(Message(role=Role.ASSISTANT, content="", tool_calls=calls))
        converted, shouted = (m.content for m in step.observations)
        assert json.loads(converted)["target"]["datetime"][11:16] == "04:00"
        assert shouted == "HI"
        final = await env.step(Message(role=Role.ASSISTANT, content="It is 04:00."))
        assert final.done and final.reward == 1.0
    finally:
        await env.close()
    await close_shared()  # a shared server outlives its episodes for a few seconds
    assert psutil.Process().children(recursive=True) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("    command: python", "    comand: python"),
            r"env\.yaml:6: servers\.time\.comand: unknown key \(did you mean 'command'\?\)",
        ),
        (
            ("max_turns: 3", "max_turns: 0"),
            r"env\.yaml:13: max_turns: .*greater than or equal to 1",
        ),
        (("tasks: tasks.jsonl", "tasks: missing.jsonl"), r"env\.yaml:11: tasks: no file .*missing"),
        (
            ("verifier: helpers.py:verify", "verifier: helpers.py:nope"),
            r"env\.yaml:12: verifier: .*has no attribute 'nope'",
        ),
        (
            ("verifier: helpers.py:verify", "verifier: helpers.py:old_verify"),
            r"env\.yaml:12: verifier: verifier 'old_verify' takes \(task, messages\); a verifier "
            r"takes one argument",
        ),
        (
            ("    command: python\n", "    url: http://127.0.0.1:1/mcp\n"),
            r"env\.yaml:5: servers\.time: .*args, env and cwd are for stdio servers",
        ),
    ],
)
def test_a_mistake_in_an_env_file_is_named_with_its_line(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    path = write_env(tmp_path, ENV_YAML.replace(*change))
    with pytest.raises(ConfigError, match=message):
        get_env(str(path))


def test_a_missing_env_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nothere\.yaml: config file not found"):
        get_env(str(tmp_path / "nothere.yaml"))
