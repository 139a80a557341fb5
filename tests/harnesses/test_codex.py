"""The real Codex CLI (``codex exec``) against the gateway's Responses API: it runs one prompt
on the scripted model, which calls Codex's own ``exec_command`` tool; Codex runs the command,
sends its output back, and the session is one token-exact trajectory."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from harness_runs import (
    ANSWER,
    MODEL,
    PROMPT,
    RUN,
    assert_token_exact,
    first_prompt_tokens,
    fresh_folders,
    harness_binary,
    offline_env,
    run_harness,
    scripted_gateway,
    session_trajectories,
    tool_call_exchange,
    tool_then_answer,
)

from trajforge.policy.naming import load_policy
from trajforge.policy.token_policy import TokenPolicy
from trajforge.schema import OutcomeStatus
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving
from trajforge.store import TrajectoryStore

pytestmark = pytest.mark.slow

VERSION = "0.171.0"
COMMAND = "echo hello > hello.txt"
# The embedded model's window (SmolLM2-135M-Instruct) and the tiny model's.
EMBEDDED_WINDOW = 8192
TINY_WINDOW = 4096


def codex_config(url: str, session: str, model: str = MODEL) -> str:
    """config.toml: the served model through a provider on the session, speaking Responses,
    with Codex's default tools (its hosted web search, which the gateway leaves out, and its
    namespaced sub-agent tools)."""
    return f"""model = "{model}"
model_provider = "gateway"

[model_providers.gateway]
name = "gateway"
base_url = "{url}/sessions/{session}/v1"
wire_api = "responses"
env_key = "GATEWAY_API_KEY"
"""


def codex_home_and_env(home: Path) -> tuple[Path, dict[str, str]]:
    codex_home = home / ".codex"
    codex_home.mkdir()
    return codex_home, offline_env(home, CODEX_HOME=str(codex_home), GATEWAY_API_KEY="dummy")


# Codex's own sandbox (bubblewrap) confines the command to the workspace.
EXEC = ["exec", "--skip-git-repo-check", "--sandbox", "workspace-write"]


def test_codex_run_is_one_token_exact_trajectory(tmp_path: Path) -> None:
    codex = harness_binary("codex")
    workspace, home, store = fresh_folders(tmp_path)
    codex_home, env = codex_home_and_env(home)
    reply = tool_then_answer("exec_command", {"cmd": COMMAND})
    argv = [str(codex), *EXEC]
    with scripted_gateway(store, reply) as (url, paths):
        (codex_home / "config.toml").write_text(codex_config(url, "codex-1"))
        done = run_harness([*argv, PROMPT], workspace, env)
    assert done.returncode == 0, done.stderr
    assert ANSWER in done.stdout
    assert (workspace / "hello.txt").read_text() == "hello\n"
    assert set(paths) == {"/sessions/codex-1/v1/responses"}

    (traj,) = session_trajectories(store, "codex-1")
    call, output = tool_call_exchange(traj, "exec_command")
    assert call.tool_calls[0].arguments == {"cmd": COMMAND}
    assert "Process exited with code 0" in str(output.content)
    assert traj.messages[-1].content == ANSWER
    offered = {t.function.name for t in traj.tools}
    assert {"exec_command", "multi_agent_v1__spawn_agent"} <= offered
    assert not any("web_search" in name for name in offered)
    client = traj.metadata["gateway"]["client"]
    assert client["name"] == "codex_exec" and client["version"] == VERSION
    # With its sub-agent tools Codex's first prompt outgrows the embedded model's window.
    assert first_prompt_tokens(traj) > EMBEDDED_WINDOW
    assert_token_exact(store)


def test_codex_is_told_its_prompt_does_not_fit_the_model(tmp_path: Path) -> None:
    """On ``tiny`` (a window of 4,096 tokens) Codex's first call fails with the API's
    ``context_length_exceeded``, which Codex reads as a full context window (no retries);
    nothing is cut."""
    codex = harness_binary("codex")
    workspace, home, store_path = fresh_folders(tmp_path)
    codex_home, env = codex_home_and_env(home)
    policy = load_policy("tiny")
    assert isinstance(policy, TokenPolicy) and policy.max_context_tokens == TINY_WINDOW
    with TrajectoryStore(store_path) as store, serving(Gateway(policy, store, run_id=RUN)) as url:
        (codex_home / "config.toml").write_text(codex_config(url, "codex-1", "tiny"))
        done = run_harness([str(codex), *EXEC, "--json", PROMPT], workspace, env)
        (traj,) = store.query(run=RUN)
    asyncio.run(policy.close())
    assert done.returncode == 1
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    (failed,) = [e for e in events if e["type"] == "turn.failed"]
    assert "context window" in failed["error"]["message"]
    assert traj.outcome.status is OutcomeStatus.TRUNCATED
