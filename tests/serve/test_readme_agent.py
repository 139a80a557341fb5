"""The README's own-agent program runs as it is printed there: taken out of the README, run as
a file against a gateway on 127.0.0.1, it makes its tool calls and leaves one token-exact
trajectory in the store."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_helpers import assert_token_exact, session_trajectories

from trajforge.formats.tool_calls import format_tool_call
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.schema import Message, Role, Task
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving
from trajforge.store import TrajectoryStore

README = Path(__file__).parents[2] / "README.md"
SECTION = "## Training data from agents you already have"


def readme_agent() -> str:
    """The first Python block of the README's own-agent section."""
    section = README.read_text(encoding="utf-8").split(SECTION, 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "the README's own-agent section has no Python block"
    return match.group(1)


def calculating_reply(task: Task | None, messages: list[Message]) -> str:
    """Work the question out with one calculator call, then answer with its result."""
    results = [m.content for m in messages if m.role is Role.TOOL]
    if results:
        return f"The answer is {results[-1]}."
    question = next(m.content for m in messages if m.role is Role.USER)
    expression = question.removeprefix("What is ").rstrip("?")
    return format_tool_call("calculator", {"expression": expression})


@pytest.fixture
def gateway_url(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    path = tmp_path / "agents.db"
    store = TrajectoryStore(path)
    policy = ScriptedPolicy(calculating_reply, load_tokenizer(), name="scripted-calculator")
    try:
        with serving(Gateway(policy, store, run_id="gw")) as url:
            yield url, path
    finally:
        store.close()


def test_readme_agent_runs_alone_against_a_gateway(
    gateway_url: tuple[str, Path], tmp_path: Path
) -> None:
    url, store_path = gateway_url
    program = tmp_path / "my_agent.py"
    program.write_text(readme_agent(), encoding="utf-8")
    env = {**os.environ, "OPENAI_BASE_URL": f"{url}/sessions/readme/v1"}
    env["TRAJFORGE_MODEL"] = "scripted-calculator"
    task = json.dumps({"id": "t1", "prompt": "What is 17 * 23 - 4?"})
    done = subprocess.run(
        [sys.executable, str(program)], input=task, capture_output=True, text=True, timeout=120,
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (traj,) = session_trajectories(store_path, "readme")
    tool_results = [m.content for m in traj.messages if m.role is Role.TOOL]
    assert tool_results == ["387"]
    assert traj.messages[-1].content == "The answer is 387."
    assert_token_exact(store_path)


def test_readme_agent_without_a_task_on_stdin_asks_its_own_question(
    gateway_url: tuple[str, Path], tmp_path: Path
) -> None:
    url, store_path = gateway_url
    program = tmp_path / "my_agent.py"
    program.write_text(readme_agent(), encoding="utf-8")
    env = {**os.environ, "OPENAI_BASE_URL": f"{url}/sessions/alone/v1"}
    env["TRAJFORGE_MODEL"] = "scripted-calculator"
    done = subprocess.run(
        [sys.executable, str(program)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (traj,) = session_trajectories(store_path, "alone")
    assert traj.messages[0].content == "What is 17 * 23 - 4?"
