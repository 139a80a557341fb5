"""The real opencode (``opencode run``) against the gateway, once per API its providers speak:
Chat Completions (``@ai-sdk/openai-compatible``), the Anthropic Messages API
(``@ai-sdk/anthropic``) and Responses (``@ai-sdk/openai``). The scripted model calls opencode's
own ``write`` tool; opencode writes the file, sends the result back, and the session is one
token-exact trajectory. opencode's title call goes to a session of its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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

VERSION = "1.18.33"
# opencode's provider package for each API and the path it calls under the base URL.
APIS = {
    "chat": ("@ai-sdk/openai-compatible", "/v1/chat/completions"),
    "messages": ("@ai-sdk/anthropic", "/v1/messages"),
    "responses": ("@ai-sdk/openai", "/v1/responses"),
}


def provider(package: str, base_url: str) -> dict[str, Any]:
    return {
        "npm": package,
        "options": {"baseURL": f"{base_url}/v1", "apiKey": "dummy"},
        "models": {MODEL: {"name": MODEL}},
    }


def opencode_config(package: str, url: str, session: str) -> dict[str, Any]:
    """opencode.json: the agent's model on the session, the small model (titles) on a session
    of its own, nothing shared or updated."""
    return {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "provider": {
            "gateway": provider(package, f"{url}/sessions/{session}"),
            "gateway-titles": provider(package, f"{url}/sessions/{session}-titles"),
        },
        "model": f"gateway/{MODEL}",
        "small_model": f"gateway-titles/{MODEL}",
    }


def opencode_env(home: Path) -> dict[str, str]:
    """opencode with its update check, models.dev fetch, sharing, language-server downloads,
    default plugins and Claude Code compatibility (reading ~/.claude) off."""
    switches = ["AUTOUPDATE", "MODELS_FETCH", "SHARE", "LSP_DOWNLOAD", "DEFAULT_PLUGINS",
                "CLAUDE_CODE"]  # fmt: skip
    return offline_env(home, **{f"OPENCODE_DISABLE_{s}": "1" for s in switches})


@pytest.mark.parametrize("api", list(APIS))
def test_opencode_run_is_one_token_exact_trajectory(tmp_path: Path, api: str) -> None:
    opencode = harness_binary("opencode")
    package, route = APIS[api]
    workspace, home, store = fresh_folders(tmp_path)
    target = workspace / "hello.txt"
    reply = tool_then_answer("write", {"filePath": str(target), "content": "hello\n"})
    with scripted_gateway(store, reply) as (url, paths):
        config = opencode_config(package, url, "opencode-1")
        (workspace / "opencode.json").write_text(json.dumps(config))
        done = run_harness([str(opencode), "run", PROMPT], workspace, opencode_env(home))
    assert done.returncode == 0, done.stderr
    assert ANSWER in done.stdout
    assert target.read_text() == "hello\n"
    assert f"/sessions/opencode-1{route}" in paths
    assert {p.rsplit("/", 1)[-1] for p in paths} == {route.rsplit("/", 1)[-1]}

    (traj,) = session_trajectories(store, "opencode-1")
    call, output = tool_call_exchange(traj, "write")
    assert call.tool_calls[0].arguments == {"filePath": str(target), "content": "hello\n"}
    assert "Wrote file successfully" in str(output.content)
    assert traj.messages[-1].content == ANSWER
    assert {"bash", "read", "write"} <= {t.function.name for t in traj.tools}
    client = traj.metadata["gateway"]["client"]
    assert client["name"] == "opencode" and client["version"] == VERSION
    assert_token_exact(store)
