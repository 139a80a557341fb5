"""What the harness tests share: the pinned harness binaries ``make setup`` installs into
``.npm-peers``, a gateway whose scripted model calls one of the harness's own tools and then
answers, a run of the harness in a process group of its own, and the checks a recorded
session must pass."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from fastapi import Request, Response

from trajforge.formats.tool_calls import format_tool_call
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ReplyFn, ScriptedPolicy
from trajforge.schema import Message, Role, Task, Trajectory
from trajforge.serve.app import create_app
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving_app
from trajforge.store import TrajectoryStore

MODEL = "scripted-agent"
RUN = "gw"
BIN = Path(__file__).parents[2] / ".npm-peers" / "node_modules" / ".bin"
TRAJFORGE = str(Path(sys.executable).parent / "trajforge")
PROMPT = "Write the word hello into hello.txt."
ANSWER = "I wrote hello into hello.txt."
RUN_TIMEOUT_S = 240


def harness_binary(name: str) -> Path:
    """The harness ``name`` as ``make setup`` installs it; the test skips, saying why, where
    node or the harness is missing."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the harness tests run the real npm harnesses")
    binary = BIN / name
    if not binary.exists():
        pytest.skip(f"{name} is not installed in .npm-peers: run `make setup`")
    return binary


def tool_then_answer(tool: str, arguments: dict[str, Any]) -> ReplyFn:
    """A model that answers the user's ``PROMPT`` with one call of the harness's ``tool``,
    then, once the tool's result is in, with ``ANSWER``; any other call the harness makes on
    the side (a title, a topic check) gets a short text."""

    def reply(task: Task | None, messages: list[Message]) -> str:
        if any(m.role is Role.TOOL for m in messages):
            return ANSWER
        asked = any(m.role is Role.USER and PROMPT in str(m.content) for m in messages)
        if asked and not _side_call(messages):
            return format_tool_call(tool, arguments)
        return "Hello file"

    return reply


def _side_call(messages: list[Message]) -> bool:
    # opencode asks its small model for the session's title with the user's prompt quoted.
    system = " ".join(str(m.content) for m in messages if m.role is Role.SYSTEM)
    return "title generator" in system


@contextmanager
def scripted_gateway(store_path: Path, reply: ReplyFn) -> Iterator[tuple[str, list[str]]]:
    """``trajforge serve``'s app over ``reply`` (the embedded model's tokenizer renders it),
    on 127.0.0.1 for the block, recording run ``gw``; yields the base URL and the list the
    path of each request it is sent is added to (which API the harness spoke)."""
    store = TrajectoryStore(store_path)
    policy = ScriptedPolicy(reply, load_tokenizer(), name=MODEL)
    app = create_app(Gateway(policy, store, run_id=RUN))
    paths: list[str] = []

    @app.middleware("http")
    async def _note_path(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        paths.append(request.url.path)
        return await call_next(request)

    try:
        with serving_app(app) as url:
            yield url, paths
    finally:
        store.close()


def fresh_folders(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A new workspace, a new home for the harness, and the gateway's store path."""
    workspace, home = tmp_path / "work", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    return workspace, home, tmp_path / "gw.db"


def offline_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment with nothing of the user's: ``home`` as HOME, and every XDG folder and
    the temporary folder in it."""
    scratch = home / "tmp"
    scratch.mkdir(exist_ok=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "TMPDIR": str(scratch), "LANG": "C.UTF-8"}
    for var, sub in [("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share"),
                     ("XDG_CACHE_HOME", ".cache"), ("XDG_STATE_HOME", ".local/state")]:  # fmt: skip
        env[var] = str(home / sub)
    return {**env, **extra}


def run_harness(
    argv: list[str], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``argv`` in a process group of its own, killed whole on the way out (a harness leaves
    helpers behind: a language server, a shell), within ``RUN_TIMEOUT_S``."""
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def session_trajectories(store_path: Path, session: str) -> list[Trajectory]:
    with TrajectoryStore(store_path) as store:
        found = store.query(run=RUN)
    return [t for t in found if t.metadata["gateway"]["session"] == session]


def tool_call_exchange(traj: Trajectory, tool: str) -> tuple[Message, Message]:
    """The assistant turn that called ``tool`` and the tool result the harness sent back."""
    (call,) = [m for m in traj.messages if any(c.name == tool for c in m.tool_calls)]
    (result,) = [m for m in traj.messages if m.role is Role.TOOL]
    assert result.tool_call_id == call.tool_calls[0].id
    return call, result


def first_prompt_tokens(traj: Trajectory) -> int:
    """The tokens of the harness's first prompt: everything before the first sampled turn."""
    first = next(k for k, m in enumerate(traj.messages) if m.role is Role.ASSISTANT)
    return sum(len(m.token_ids or []) for m in traj.messages[:first])


def assert_token_exact(store_path: Path) -> None:
    """``trajforge check`` on the run, as a user runs it."""
    argv = [TRAJFORGE, "check", "--store", str(store_path), "--run", RUN, "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["checked"] >= 1 and report["mismatches"] == [], report
