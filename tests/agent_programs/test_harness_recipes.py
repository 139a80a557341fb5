"""A harness recipe as a confined run sees it: its config written into the run's workspace,
pointing at the run's session on the sandbox's loopback, its switches set, and all of it gone
when the run ends. A stand-in ``opencode`` (a Python script) reads the config the way opencode
does and makes the call; the real binaries run in ``tests/harnesses``."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from serve_helpers import MODEL

from trajforge.agent_programs import AgentRunner, collected_program
from trajforge.envs.sandbox import sandbox_available
from trajforge.errors import ConfigError
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.rollout import Limits, RolloutSpec, run_rollout
from trajforge.schema import Message, OutcomeStatus, Role, Task
from trajforge.serve.gateway import Gateway

STAND_IN = """#!/usr/bin/python3
import json, os, sys, urllib.request
assert sys.argv[1] == "run" and os.getcwd() == "/workspace"
config = json.load(open("opencode.json"))
options = config["provider"]["gateway"]["options"]
switches = sorted(k for k in os.environ if k.startswith("OPENCODE_DISABLE_"))
body = {"model": config["model"].split("/", 1)[1],
        "messages": [{"role": "user", "content": sys.argv[2] + " " + " ".join(switches)}]}
request = urllib.request.Request(
    options["baseURL"] + "/chat/completions", data=json.dumps(body).encode(),
    headers={"Content-Type": "application/json", "Authorization": "Bearer " + options["apiKey"]})
urllib.request.urlopen(request, timeout=60).read()
"""


def echo(task: Task | None, messages: list[Message]) -> str:
    return "done"


@pytest.mark.skipif(not sandbox_available(), reason="bubblewrap cannot run here")
def test_the_opencode_recipe_points_its_config_at_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, runs = tmp_path / "bin", tmp_path / "runs"
    bin_dir.mkdir()
    runs.mkdir()
    opencode = bin_dir / "opencode"
    opencode.write_text(STAND_IN)
    opencode.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)  # no .npm-peers here: the stand-in on PATH is the one found
    monkeypatch.setattr(tempfile, "tempdir", str(runs))
    command, confinement, setup = collected_program(None, "opencode", None)
    assert command == str(opencode) and confinement is not None
    assert confinement.read_only == [bin_dir]  # no node_modules: the binary's own folder
    gateway = Gateway(ScriptedPolicy(echo, load_tokenizer(), name=MODEL), None, run_id="")
    spec = RolloutSpec(
        tasks=[Task(id="t", prompt="Write hello.")], limits=Limits(episode_timeout_s=60)
    )
    runner = AgentRunner(command, gateway=gateway, confine=confinement, setup=setup)
    (traj,) = run_rollout(spec, runner=runner)
    assert traj.outcome.status is OutcomeStatus.OK, traj.outcome
    (asked,) = [m for m in traj.messages if m.role is Role.USER]
    switches = ["AUTOUPDATE", "CLAUDE_CODE", "DEFAULT_PLUGINS", "LSP_DOWNLOAD", "MODELS_FETCH",
                "SHARE"]  # fmt: skip
    assert asked.content == "Write hello. " + " ".join(f"OPENCODE_DISABLE_{s}" for s in switches)
    assert traj.messages[-1].content == "done"
    assert list(runs.iterdir()) == [], "the config is removed with the run's folder"


def test_a_harness_that_is_not_installed_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.chdir("/")
    with pytest.raises(ConfigError, match="--harness codex: codex is not on PATH"):
        collected_program(None, "codex", None)
