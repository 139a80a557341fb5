"""16 concurrent episodes against the reference npm server ``server-everything``, run with node.

``make setup`` installs it into ``.npm-peers/`` of the checkout; the tests skip only on a machine
without node.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from flaky_env import calls_task, scripted

from local_servers import free_port, listening
from trajforge.envs.mcp import MCPEnv, MCPServerSpec
from trajforge.policy.naming import load_policy
from trajforge.rollout import RolloutSpec, run_rollout
from trajforge.schema import OutcomeStatus, Role, Task, Trajectory

NODE = shutil.which("node")
PACKAGE = "@modelcontextprotocol/server-everything"
SERVER = Path(__file__).parents[3] / ".npm-peers" / "node_modules" / PACKAGE / "dist" / "index.js"
EPISODES = 16

pytestmark = pytest.mark.skipif(
    NODE is None, reason="node is not installed (make setup installs it)"
)

# (tool, arguments) -> the tool message the model reads.
CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("echo", {"message": "hello"}, "Echo: hello"),
    ("get-sum", {"a": 2, "b": 40.5}, "The sum of 2 and 40.5 is 42.5."),
    (
        "get-tiny-image",
        {},
        "Here's the image you requested:\n[image: image/png, 4033 bytes]\n"
        "The image above is the MCP logo.",
    ),
    (
        "get-resource-links",
        {"count": 1},
        "Here are 1 resource links to resources available in this server:\n"
        "[resource link Blob Resource 1 <demo://resource/dynamic/blob/1>, text/plain: "
        "Resource 1: plaintext resource]",
    ),
    (
        "get-sum",
        {"a": "two", "b": 1},
        "Error: invalid arguments for tool 'get-sum': argument 'a': 'two' is not of type 'number'",
    ),
]


def installed_server() -> Path:
    assert SERVER.is_file(), f"{PACKAGE} is not installed at {SERVER}: run `make setup`"
    return SERVER


def everything_env(spec: MCPServerSpec) -> MCPEnv:
    return MCPEnv([spec], expert=scripted, verifier=lambda evidence: 1.0, max_turns=len(CALLS) + 2)


def task(i: int) -> Task:
    # Each episode makes the calls in its own order, so concurrent requests differ.
    turn = i % len(CALLS)
    order = CALLS[turn:] + CALLS[:turn]
    return calls_task(f"everything-{i}", *((name, args) for name, args, _ in order))


def run_episodes(spec: MCPServerSpec) -> list[Trajectory]:
    rollout = RolloutSpec(tasks=[task(i) for i in range(EPISODES)], concurrency=EPISODES)
    return run_rollout(
        rollout, env=lambda: everything_env(spec), policy=load_policy("expert", expert=scripted)
    )


def assert_every_call_answered(trajectories: list[Trajectory]) -> None:
    expected = {(name, repr(args)): text for name, args, text in CALLS}
    assert [t.outcome.status for t in trajectories] == [OutcomeStatus.OK] * EPISODES
    for traj in trajectories:
        calls = [c for m in traj.messages for c in m.tool_calls or []]
        results = [m.content for m in traj.messages if m.role is Role.TOOL]
        assert len(results) == len(CALLS)
        assert results == [expected[c.name, repr(c.arguments)] for c in calls]
        assert "get-structured-content" in {t.name for t in traj.tools}


def no_children() -> bool:
    deadline = time.monotonic() + 10
    while psutil.Process().children(recursive=True) and time.monotonic() < deadline:
        time.sleep(0.05)
    return psutil.Process().children(recursive=True) == []


def test_16_concurrent_episodes_each_with_its_own_stdio_server() -> None:
    spec = MCPServerSpec(
        name="everything",
        command=NODE,
        args=[str(installed_server()), "stdio"],
        startup_timeout_s=60,
    )
    trajectories = run_episodes(spec)
    assert_every_call_answered(trajectories)
    assert no_children()


def test_the_server_gets_the_environment_variables_of_its_spec() -> None:
    spec = MCPServerSpec(
        name="everything",
        command=NODE,
        args=[str(installed_server()), "stdio"],
        env={"TRAJFORGE_PROBE": "passed"},
        startup_timeout_s=60,
    )
    probe = calls_task("env", ("get-env", {}))
    [traj] = run_rollout(
        RolloutSpec(tasks=[probe]),
        env=lambda: everything_env(spec),
        policy=load_policy("expert", expert=scripted),
    )
    [result] = [m.content for m in traj.messages if m.role is Role.TOOL]
    assert '"TRAJFORGE_PROBE": "passed"' in result
    assert no_children()


@contextlib.contextmanager
def http_server() -> Iterator[str]:
    """server-everything's streamable-HTTP transport on a free port; yields its URL."""
    assert NODE is not None
    port = free_port()
    argv = [NODE, str(installed_server()), "streamableHttp"]
    with listening(argv, port, {**os.environ, "PORT": str(port)}, "server-everything") as process:
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)


def test_16_concurrent_episodes_each_with_its_own_http_session() -> None:
    with http_server() as url:
        trajectories = run_episodes(MCPServerSpec(name="everything", url=url))
    assert_every_call_answered(trajectories)
    assert no_children()
