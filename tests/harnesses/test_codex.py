"""The real Codex CLI (``codex exec``) against the gateway's Responses API: it runs one prompt
on the scripted model, which calls Codex's own ``exec_command`` tool; Codex runs the command,
sends its output back, and the session is one token-exact trajectory."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness_runs import (
    ANSWER,
    MODEL,
    PROMPT,
    assert_token_exact,
    fresh_folders,
    harness_binary,
    offline_env,
    run_harness,
    scripted_gateway,
    session_trajectories,
    tool_call_exchange,
    tool_then_answer,
)

pytestmark = pytest.mark.slow

VERSION = "0.171.0"
COMMAND = "echo hello > hello.txt"


def codex_config(url: str, session: str) -> str:
    """config.toml: the served model through a provider on the session, speaking Responses;
    the hosted web search and the sub-agent tools (which no local model serves) off."""
    return f"""model = "{MODEL}"
model_provider = "gateway"
web_search = "disabled"

[agents]
enabled = false

[model_providers.gateway]
name = "gateway"
base_url = "{url}/sessions/{session}/v1"
wire_api = "responses"
env_key = "GATEWAY_API_KEY"
"""


def test_codex_run_is_one_token_exact_trajectory(tmp_path: Path) -> None:
    codex = harness_binary("codex")
    workspace, home, store = fresh_folders(tmp_path)
    codex_home = home / ".codex"
    codex_home.mkdir()
    reply = tool_then_answer("exec_command", {"cmd": COMMAND})
    env = offline_env(home, CODEX_HOME=str(codex_home), GATEWAY_API_KEY="dummy")
    # Codex's own sandbox (bubblewrap) confines the command to the workspace.
    argv = [str(codex), "exec", "--skip-git-repo-check", "--sandbox", "workspace-write"]
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
    assert "exec_command" in {t.function.name for t in traj.tools}
    client = traj.metadata["gateway"]["client"]
    assert client["name"] == "codex_exec" and client["version"] == VERSION
    assert_token_exact(store)
