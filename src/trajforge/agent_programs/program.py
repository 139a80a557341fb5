"""The agent program contract: how one run is started, what it is told, and how it ends.

The program is started in its own process group with ``OPENAI_BASE_URL`` pointing at its gateway
session, ``OPENAI_API_KEY`` set, and the task as JSON in ``TRAJFORGE_TASK`` and on stdin. Its
reward is one posted to ``$TRAJFORGE_SESSION_URL/reward`` or a ``{"reward": x}`` last JSON line
on stdout (else the environment's verifier judges it, ``runner``). A program that outlives its
time is killed with everything it started. ``launch_here`` runs it in this machine's process
tree; ``ray_launch`` runs it as a Ray task.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from trajforge.errors import ConfigError
from trajforge.schema import Task

STDERR_TAIL_CHARS = 2000
KILL_GRACE_S = 2.0


@dataclass(frozen=True)
class AgentExit:
    """How one run of the agent program ended."""

    returncode: int | None
    """Its exit status (``None``: killed, with everything it started, after the timeout)."""
    stdout: str
    stderr: str
    """The last ``STDERR_TAIL_CHARS`` of it."""

    @property
    def printed_reward(self) -> float | None:
        """The reward of a ``{"reward": x}`` last JSON line on stdout, if it printed one."""
        for line in reversed(self.stdout.strip().splitlines()):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict) and isinstance(value.get("reward"), int | float):
                return float(value["reward"])
            return None
        return None


AgentLauncher = Callable[[list[str], Mapping[str, str], str, float | None], Awaitable[AgentExit]]
"""``launch(argv, env, stdin, timeout_s)``: run the program once in its own process group,
with ``env`` set over the environment it inherits and ``stdin`` as its input; kill the group
after ``timeout_s`` (``None``: never) or when cancelled."""


def agent_argv(agent: str) -> list[str]:
    """The command line of ``agent``; a leading ``python`` (or ``python3``) is the interpreter
    trajforge runs under, so the agent sees the same packages whatever the PATH holds."""
    argv = shlex.split(agent)
    if not argv:
        raise ConfigError("--agent: give the command that runs the agent, e.g. 'python agent.py'")
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    return argv


def agent_environment(
    session_url: str, model: str, task: Task, temperature: float
) -> dict[str, str]:
    """What a run is told: its session's OpenAI base URL and key, the model, its task, and the
    temperature to sample at (RL trains the policy tempered by it, so a program that passes it
    on keeps the update on-policy)."""
    return {
        "OPENAI_BASE_URL": f"{session_url}/v1",
        "OPENAI_API_KEY": "trajforge",
        "TRAJFORGE_MODEL": model,
        "TRAJFORGE_TEMPERATURE": f"{temperature:g}",
        "TRAJFORGE_SESSION_URL": session_url,
        "TRAJFORGE_TASK": task.model_dump_json(),
    }


def finished(returncode: int | None, stdout: bytes, stderr: bytes) -> AgentExit:
    """The exit of a run from what its process left."""
    return AgentExit(
        returncode,
        stdout.decode(errors="replace"),
        stderr.decode(errors="replace")[-STDERR_TAIL_CHARS:],
    )


async def launch_here(
    argv: list[str], env: Mapping[str, str], stdin: str, timeout_s: float | None
) -> AgentExit:
    """Run the program once in this machine's process tree (the default launcher)."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **env},
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(stdin.encode()), timeout_s)
    except TimeoutError:
        await _stop_group(process)
        return AgentExit(None, "", "")
    except BaseException:
        await _stop_group(process)
        raise
    kill_group(process.pid)
    return finished(process.returncode, out, err)


async def _stop_group(process: asyncio.subprocess.Process) -> None:
    """Stop the program and everything it started: SIGTERM to its process group, SIGKILL to
    whatever is left after a grace period, then reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), KILL_GRACE_S)
    kill_group(process.pid)
    await process.wait()


def kill_group(pid: int) -> None:
    """SIGKILL what is left of the process group ``pid`` leads (children the program left
    running)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
