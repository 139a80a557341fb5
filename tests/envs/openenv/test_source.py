"""``openenv:`` against the echo environment OpenEnv ships (its ``openenv init`` template), and
servers that fail to start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from trajforge.envs.base import Env
from trajforge.envs.openenv.env import ActionMode
from trajforge.envs.openenv.process import OpenEnvServerError
from trajforge.envs.openenv.source import OpenEnvEntry, entry
from trajforge.envs.registry import get_env
from trajforge.errors import ConfigError
from trajforge.schema import Message, Role, Task, ToolCall

OPENENV_CLI = Path(sys.executable).with_name("openenv")


@pytest.fixture(scope="module")
def echo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The echo environment as ``openenv init echo_env`` writes it from the package's template
    (no network: ``uv lock`` is not on the PATH, so init skips it)."""
    folder = tmp_path_factory.mktemp("openenv")
    offline = {**os.environ, "PATH": f"{OPENENV_CLI.parent}:/usr/bin:/bin"}
    done = subprocess.run(
        [str(OPENENV_CLI), "init", "echo_env", "--output-dir", str(folder)],
        env=offline,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (folder / "echo_env" / "server" / "app.py").is_file()
    return folder


@pytest.fixture
def echo(echo_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenEnvEntry]:
    monkeypatch.chdir(echo_dir)  # the package is named from the current directory
    found = entry("openenv:echo_env.server.app:app")
    yield found
    found.server.stop()
    assert _no_children()


def _no_children() -> bool:
    return psutil.Process().children(recursive=True) == []


def _call(name: str, **arguments: object) -> Message:
    return Message(
        role=Role.ASSISTANT, tool_calls=[ToolCall(id="c", name=name, arguments=arguments)]
    )


async def test_the_echo_env_through_its_action_tool(echo: OpenEnvEntry) -> None:
    [task] = echo.tasks(1, seed=2)
    assert task.data["seed"] == 20_000
    env = echo.make()
    try:
        opening = await env.reset(task)
        assert json.loads(opening[1].content)["echoed_message"] == "Echo Env environment ready!"
        [tool] = env.tools
        assert tool.name == "echo_action" and tool.function.parameters["required"] == ["message"]
        assert "metadata" not in tool.function.parameters["properties"]
        step = await env.step(_call("echo_action", message="hello"))
        assert json.loads(step.observations[0].content) == {
            "echoed_message": "hello",
            "message_length": 5,
        }
        assert step.reward == pytest.approx(0.5) and not step.done
        assert step.state_key != (await _state_key_after(env, "hi"))
        wrong = await env.step(_call("echo_action", text="no such field"))
        assert wrong.observations[0].content.startswith("Error: the environment refused")
        unknown = await env.step(_call("shout", message="x"))
        assert unknown.observations[0].content.startswith("Error: unknown tool 'shout'")
        assert (await env.state())["step_count"] == 2
        end = await env.step(Message(role=Role.ASSISTANT, content="I am done."))
        assert end.done and end.reward == 0.0 and end.info == {"env_done": False}
    finally:
        await env.close()


async def _state_key_after(env: Env, message: str) -> str | None:
    return (await env.step(_call("echo_action", message=message))).state_key


async def test_the_echo_env_with_text_actions_and_through_its_url(echo: OpenEnvEntry) -> None:
    url = await echo.server.url()
    text = get_env(f"openenv-text:{url}")
    assert text.source.value == "openenv" and url in text.description
    env = text.make()
    try:
        opening = await env.reset(Task(id="t", prompt="Say something.", data={"seed": 1}))
        assert opening[1].content.startswith("Say something.\n\n{")
        assert "Each reply of yours is one action" in opening[0].content
        step = await env.step(Message(role=Role.ASSISTANT, content="ping"))
        assert step.observations[0].role is Role.USER
        assert json.loads(step.observations[0].content)["echoed_message"] == "ping"
        assert step.reward == pytest.approx(0.4) and not step.done
    finally:
        await env.close()
    assert (await text.make().list_tools()) == []
    assert [t.name for t in await echo.make().list_tools()] == ["echo_action"]


async def test_a_server_that_crashes_at_start_leaves_its_stderr_and_nothing_running(
    tmp_path: Path,
) -> None:
    (tmp_path / "broken.py").write_text("raise RuntimeError('the env cannot find its data')\n")
    broken = entry(f"openenv:{tmp_path / 'broken.py'}:app", startup_timeout_s=120)
    with pytest.raises(OpenEnvServerError) as caught:
        await broken.make().reset(Task(id="t", prompt=""))
    assert "exited with status 1 before it answered" in str(caught.value)
    assert "the env cannot find its data" in str(caught.value)
    assert _no_children()


@pytest.mark.slow
async def test_a_server_that_does_not_answer_times_out_and_is_killed(tmp_path: Path) -> None:
    hang = tmp_path / "hang.py"
    hang.write_text(
        "import sys, time\nprint('loading the weights', file=sys.stderr, flush=True)\n"
        "time.sleep(600)\n"
    )
    slow = entry(f"openenv:{hang}:app", startup_timeout_s=20)
    with pytest.raises(OpenEnvServerError) as caught:
        await slow.make().reset(Task(id="t", prompt=""))
    assert "did not answer within 20 s" in str(caught.value)
    assert "its stderr ends: loading the weights" in str(caught.value)
    assert _no_children()


def test_a_target_that_is_neither_a_url_nor_code_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"openenv:echo'.*server URL"):
        get_env("openenv:echo")
    assert entry("openenv:http://127.0.0.1:9/").make().mode is ActionMode.TOOL
