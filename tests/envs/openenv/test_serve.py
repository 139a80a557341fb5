"""``trajforge openenv serve calculator`` driven by OpenEnv's own client, typed and generic."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from openenv.core.generic_client import GenericEnvClient

from trajforge.envs.builtin.calculator import calculator
from trajforge.envs.openenv.models import (
    AssistantAction,
    EpisodeState,
    ToolCallAction,
    TrajforgeEnvClient,
)
from trajforge.envs.openenv.server import EpisodeOrderError, TrajforgeEnvironment
from trajforge.envs.registry import get_env
from trajforge.errors import ConfigError

STARTUP_S = 120.0
WORLD_CLOCK = Path(__file__).resolve().parents[3] / "examples" / "mcp_env" / "world_clock.py"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _served(env: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``trajforge openenv serve ENV`` on a free port, up; stopped with its group after."""
    port = _free_port()
    command = [sys.executable, "-m", "trajforge", "openenv", "serve", env]
    process = subprocess.Popen(
        [*command, "--port", str(port)], stderr=subprocess.PIPE, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        else:
            assert process.stderr is not None
            pytest.fail(f"the server did not start: {process.stderr.read().decode()[-800:]}")
        yield url, process
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)


@pytest.fixture(scope="module")
def calculator_url() -> Iterator[str]:
    with _served("calculator") as (url, _):
        yield url


async def test_openenvs_typed_client_solves_a_calculator_task(calculator_url: str) -> None:
    task = get_env("calculator").tasks(1, seed=3)[0]
    first = task.data["steps"][0]
    async with TrajforgeEnvClient(base_url=calculator_url) as client:
        reset = await client.reset(seed=3)
        assert reset.observation.task_id == task.id and not reset.done
        assert [m.role for m in reset.observation.messages] == ["system", "user"]
        assert reset.observation.messages[1].content == task.prompt
        assert [t["function"]["name"] for t in reset.observation.tools] == ["calculator"]
        call = ToolCallAction(id="c1", name="calculator", arguments={"expression": first})
        step = await client.step(AssistantAction(tool_calls=[call]))
        [result] = step.observation.messages
        assert (result.role, result.tool_call_id, result.name) == ("tool", "c1", "calculator")
        assert result.content == await calculator.invoke({"expression": first}, None)
        assert not step.done and step.observation.info["tool_calls"] == 1
        final = await client.step(AssistantAction(content=f"The answer is {task.answer}."))
        assert final.done and final.reward == 1.0 and final.observation.messages == []
        state = await client.state()
        assert isinstance(state, EpisodeState)
        assert (state.task_id, state.step_count, state.done, state.reward) == (task.id, 2, True, 1)


async def test_a_wrong_answer_scores_0_and_sessions_hold_episodes_apart(
    calculator_url: str,
) -> None:
    train = get_env("calculator").tasks(1, seed=5)[0]
    test = get_env("calculator").tasks(1, seed=5, split="test")[0]
    async with (
        TrajforgeEnvClient(base_url=calculator_url) as one,
        GenericEnvClient(base_url=calculator_url) as other,
    ):
        assert (await one.reset(seed=5)).observation.task_id == train.id
        opened = await other.reset(seed=5, split="test")
        assert opened.observation["task_id"] == test.id
        final = await one.step(AssistantAction(content=f"The answer is {train.answer}1."))
        assert final.done and final.reward == 0.0
        still = await other.state()
        assert still["task_id"] == test.id and still["step_count"] == 0 and not still["done"]
        with pytest.raises(RuntimeError, match="after the episode ended"):
            await one.step(AssistantAction(content="again"))


def test_the_schema_endpoint_publishes_the_typed_models(calculator_url: str) -> None:
    schema = httpx.get(f"{calculator_url}/schema", timeout=10).json()
    assert schema["action"] == AssistantAction.model_json_schema()
    assert set(schema["observation"]["properties"]) >= {"messages", "tools", "task_id"}
    metadata = httpx.get(f"{calculator_url}/metadata", timeout=10).json()
    assert metadata["name"] == "calculator" and "arithmetic" in metadata["description"]


def test_the_environment_class_runs_without_a_server_on_a_loop_of_its_own() -> None:
    task = get_env("calculator").tasks(1, seed=1, split="test")[0]
    environment = TrajforgeEnvironment(get_env("calculator"))
    try:
        with pytest.raises(EpisodeOrderError, match="reset before the first step"):
            environment.step(AssistantAction(content="too early"))
        opened = environment.reset(seed=1, split="test")
        assert opened.task_id == task.id and opened.messages[1].content == task.prompt
        final = environment.step(AssistantAction(content=f"The answer is {task.answer}."))
        assert final.done and final.reward == 1.0 and environment.state.step_count == 1
        with pytest.raises(ConfigError, match="split: must be 'train' or 'test'"):
            environment.reset(split="dev")
    finally:
        environment.close()
    assert environment.env is None


@pytest.mark.slow
async def test_an_mcp_env_is_served_and_its_server_stops_when_the_session_ends() -> None:
    with _served(f"{WORLD_CLOCK}:make_env") as (url, process):
        server = psutil.Process(process.pid)
        async with TrajforgeEnvClient(base_url=url) as client:
            opened = await client.reset(seed=0)
            tools = {t["function"]["name"] for t in opened.observation.tools}
            assert tools == {"get_current_time", "convert_time"}
            arguments = {
                "source_timezone": "Asia/Tokyo",
                "time": "09:00",
                "target_timezone": "Asia/Dubai",
            }
            call = ToolCallAction(id="c", name="convert_time", arguments=arguments)
            step = await client.step(AssistantAction(tool_calls=[call]))
            converted = json.loads(step.observation.messages[0].content)
            assert converted["target"]["datetime"][11:16] == "04:00"
            assert server.children(recursive=True) != []  # the episode's MCP time server
        deadline = time.monotonic() + 30
        while server.children(recursive=True) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert server.children(recursive=True) == []
