"""The real Claude Code (``claude -p``) against the gateway's Messages API: it runs one prompt
on the scripted model, which calls Claude Code's own ``Write`` tool; Claude Code writes the
file, sends the result back, and the session is one token-exact trajectory."""

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

VERSION = "2.1.197"
# The embedded model's window (SmolLM2-135M-Instruct): Claude Code's first prompt is larger.
EMBEDDED_WINDOW = 8192
TINY_WINDOW = 4096


def claude_env(home: Path, base_url: str) -> dict[str, str]:
    """Claude Code pointed at ``base_url`` with a dummy key, the served model for both of its
    model slots, and its telemetry, error reports and update checks off."""
    return offline_env(
        home,
        ANTHROPIC_BASE_URL=base_url,
        ANTHROPIC_API_KEY="dummy",
        ANTHROPIC_MODEL=MODEL,
        ANTHROPIC_SMALL_FAST_MODEL=MODEL,
        DISABLE_TELEMETRY="1",
        DISABLE_ERROR_REPORTING="1",
        DISABLE_AUTOUPDATER="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
    )


def test_claude_code_run_is_one_token_exact_trajectory(tmp_path: Path) -> None:
    claude = harness_binary("claude")
    workspace, home, store = fresh_folders(tmp_path)
    target = workspace / "hello.txt"
    reply = tool_then_answer("Write", {"file_path": str(target), "content": "hello\n"})
    with scripted_gateway(store, reply) as (url, paths):
        argv = [str(claude), "-p", PROMPT, "--output-format", "json"]
        # Edits need the user's consent; -p has no one to ask, so it is given up front.
        done = run_harness([*argv, "--permission-mode", "acceptEdits"], workspace,
                           claude_env(home, f"{url}/sessions/claude-1"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    # Besides its calls, Claude Code probes the base URL once at start (a pre-connect).
    assert set(paths) == {"/sessions/claude-1", "/sessions/claude-1/v1/messages"}
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["result"] == ANSWER
    assert result["num_turns"] == 2
    assert target.read_text() == "hello\n"

    (traj,) = session_trajectories(store, "claude-1")
    call, output = tool_call_exchange(traj, "Write")
    assert call.tool_calls[0].arguments == {"file_path": str(target), "content": "hello\n"}
    assert "File created successfully" in str(output.content)
    assert traj.messages[-1].content == ANSWER
    assert {"Bash", "Read", "Write"} <= {t.function.name for t in traj.tools}
    client = traj.metadata["gateway"]["client"]
    assert client["name"] == "claude-cli" and client["version"] == VERSION
    assert first_prompt_tokens(traj) > EMBEDDED_WINDOW
    assert_token_exact(store)


def test_claude_code_is_told_its_prompt_does_not_fit_the_model(tmp_path: Path) -> None:
    """On ``tiny`` (a window of 4,096 tokens) Claude Code's first call is refused with the
    API's own context-length error, which Claude Code reads and reports; nothing is cut."""
    claude = harness_binary("claude")
    workspace, home, store_path = fresh_folders(tmp_path)
    policy = load_policy("tiny")
    assert isinstance(policy, TokenPolicy) and policy.max_context_tokens == TINY_WINDOW
    env = claude_env(home, "")
    env["ANTHROPIC_MODEL"] = env["ANTHROPIC_SMALL_FAST_MODEL"] = "tiny"
    with TrajectoryStore(store_path) as store, serving(Gateway(policy, store, run_id=RUN)) as url:
        env["ANTHROPIC_BASE_URL"] = f"{url}/sessions/claude-1"
        done = run_harness([str(claude), "-p", PROMPT, "--output-format", "json"], workspace, env)
        (traj,) = store.query(run=RUN)
    asyncio.run(policy.close())
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["is_error"] is True and result["api_error_status"] == 400
    assert result["terminal_reason"] == "prompt_too_long"
    assert f"(limit {TINY_WINDOW - 1})" in result["result"]
    assert traj.outcome.status is OutcomeStatus.TRUNCATED
