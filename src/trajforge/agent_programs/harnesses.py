"""Recipes that run the real agent harnesses (Claude Code, Codex CLI, opencode) as the agent
program of a collection, always confined (``confine``): each run's harness config and
environment variables point it at the run's gateway session with the dummy key, turn its
non-essential traffic off, and are written into the run's own folder, removed when it ends.

A harness is found on ``PATH`` or in ``.npm-peers/node_modules/.bin`` (``make setup``); the
``node_modules`` folder it lives in is what its run may read besides the system.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from trajforge.agent_programs.confine import HOME, WORKSPACE, Confinement, RunSetup, Setup
from trajforge.errors import ConfigError

NPM_BIN = Path(".npm-peers") / "node_modules" / ".bin"
CODEX_HOME = f"{HOME}/.codex"


def _told(told: Mapping[str, str]) -> tuple[str, str, str, str]:
    """The session URL, the served model, the dummy key and the task's prompt of a run."""
    prompt = json.loads(told["TRAJFORGE_TASK"])["prompt"]
    return told["TRAJFORGE_SESSION_URL"], told["TRAJFORGE_MODEL"], told["OPENAI_API_KEY"], prompt


def claude_code(told: Mapping[str, str]) -> RunSetup:
    """``claude -p`` on the Messages API, both model slots on the served model, edits allowed
    up front (no one is there to consent; the sandbox is what bounds them)."""
    url, model, key, prompt = _told(told)
    off = ("DISABLE_TELEMETRY", "DISABLE_ERROR_REPORTING", "DISABLE_AUTOUPDATER",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC")  # fmt: skip
    env = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": key, "ANTHROPIC_MODEL": model,
           "ANTHROPIC_SMALL_FAST_MODEL": model, **dict.fromkeys(off, "1")}  # fmt: skip
    args = ["-p", prompt, "--output-format", "json", "--permission-mode", "acceptEdits"]
    return RunSetup(args, env)


def codex(told: Mapping[str, str]) -> RunSetup:
    """``codex exec`` on Responses through ``$CODEX_HOME/config.toml``; Codex's own sandbox is
    off (``danger-full-access``): it would nest bubblewrap in the run's, which confines it."""
    url, model, key, prompt = _told(told)
    config = (
        f'model = "{model}"\nmodel_provider = "gateway"\nweb_search = "disabled"\n\n'
        "[agents]\nenabled = false\n\n[model_providers.gateway]\n"
        f'name = "gateway"\nbase_url = "{url}/v1"\nwire_api = "responses"\n'
        'env_key = "GATEWAY_API_KEY"\n'
    )
    args = ["exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", prompt]
    env = {"CODEX_HOME": CODEX_HOME, "GATEWAY_API_KEY": key}
    return RunSetup(args, env, {f"{CODEX_HOME}/config.toml": config})


def opencode(told: Mapping[str, str]) -> RunSetup:
    """``opencode run`` with ``opencode.json`` in the workspace: the agent's model on the
    session (Chat Completions), the title model on a session of its own."""
    url, model, key, prompt = _told(told)

    def provider(session_url: str) -> dict[str, object]:
        options = {"baseURL": f"{session_url}/v1", "apiKey": key}
        return {"npm": "@ai-sdk/openai-compatible", "options": options, "models": {model: {}}}

    config = {
        "autoupdate": False,
        "share": "disabled",
        "provider": {"gateway": provider(url), "gateway-titles": provider(f"{url}-titles")},
        "model": f"gateway/{model}",
        "small_model": f"gateway-titles/{model}",
    }
    switches = ("AUTOUPDATE", "MODELS_FETCH", "SHARE", "LSP_DOWNLOAD", "DEFAULT_PLUGINS",
                "CLAUDE_CODE")  # fmt: skip
    env = {f"OPENCODE_DISABLE_{s}": "1" for s in switches}
    return RunSetup(["run", prompt], env, {f"{WORKSPACE}/opencode.json": json.dumps(config)})


HARNESSES: dict[str, tuple[str, Callable[[Mapping[str, str]], RunSetup]]] = {
    "claude-code": ("claude", claude_code),
    "codex": ("codex", codex),
    "opencode": ("opencode", opencode),
}
"""Each harness by name: its binary and its recipe."""


def harness(name: str) -> tuple[Path, Path, Setup]:
    """The harness ``name``: its binary, the ``node_modules`` folder its run reads, its recipe.

    Raises:
        ConfigError: an unknown name, or a harness that is not installed.
    """
    if name not in HARNESSES:
        raise ConfigError(f"--harness: unknown harness {name!r}; known: {', '.join(HARNESSES)}")
    binary_name, recipe = HARNESSES[name]
    found = shutil.which(binary_name, path=os.pathsep.join([str(NPM_BIN.resolve()),
                                                            os.environ.get("PATH", "")]))  # fmt: skip
    if found is None:
        raise ConfigError(
            f"--harness {name}: {binary_name} is not on PATH nor in {NPM_BIN}; run `make setup`"
        )
    binary = Path(found).resolve()
    installed = next((p for p in binary.parents if p.name == "node_modules"), binary.parent)
    return Path(found).absolute(), installed, recipe


def collected_program(
    agent: str | None, harness_name: str | None, confinement: Confinement | None
) -> tuple[str, Confinement | None, Setup | None]:
    """What a collection runs: the command ``agent`` (confined where ``confinement`` is given),
    or the harness ``harness_name``, always confined (by default where none is given), its
    install folder readable; and the setup of each of its runs.

    Raises:
        ConfigError: both or neither of ``agent`` and ``harness_name``, or as ``harness``.
    """
    if (agent is None) == (harness_name is None):
        raise ConfigError("collect: give --agent COMMAND or --harness NAME (one of them)")
    if harness_name is None:
        assert agent is not None
        return agent, confinement, None
    binary, installed, recipe = harness(harness_name)
    confine = confinement or Confinement()
    confine = confine.model_copy(update={"read_only": [*confine.read_only, installed]})
    return shlex.quote(str(binary)), confine, recipe
