"""The real opencode and Codex CLI as the agent program of a collection, confined
(``--harness opencode``, ``--harness codex``): the recipe writes the harness's config into the
run's folder, the harness reaches the gateway through the sandbox's one address, its own tool
writes into the workspace, and the run is one token-exact trajectory; the run's folder is gone
afterwards."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from harness_runs import (
    ANSWER,
    MODEL,
    PROMPT,
    RUN,
    assert_token_exact,
    harness_binary,
    tool_call_exchange,
    tool_then_answer,
)

from trajforge.agent_programs import AgentRunner, collected_program
from trajforge.envs.sandbox import sandbox_available
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.rollout import Limits, RolloutSpec, run_rollout
from trajforge.schema import OutcomeStatus, Task
from trajforge.serve.gateway import Gateway

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sandbox_available(), reason="bubblewrap cannot run here"),
]


# Each harness's tool that writes the file, its arguments, and what its result says.
CALLS = {
    "opencode": ("write", {"filePath": "/workspace/hello.txt", "content": "hello\n"},
                 "Wrote file successfully"),
    "codex": ("exec_command", {"cmd": "echo hello > /workspace/hello.txt"},
              "Process exited with code 0"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CALLS))
def test_confined_harness_run_is_one_token_exact_trajectory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    binary = harness_binary(name)
    runs = tmp_path / "runs"
    runs.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(runs))
    monkeypatch.chdir(binary.parents[2].parent)  # where .npm-peers is, as `make setup` left it
    command, confinement, setup = collected_program(None, name, None)
    tool, arguments, wrote = CALLS[name]
    reply = tool_then_answer(tool, arguments)
    gateway = Gateway(ScriptedPolicy(reply, load_tokenizer(), name=MODEL), None, run_id="")
    spec = RolloutSpec(
        tasks=[Task(id="hello", prompt=PROMPT)],
        limits=Limits(episode_timeout_s=240),
        run_id=RUN,
        store=tmp_path / "gw.db",
    )
    runner = AgentRunner(command, gateway=gateway, confine=confinement, setup=setup)
    (traj,) = run_rollout(spec, runner=runner)
    assert traj.outcome.status is OutcomeStatus.OK, traj.outcome
    call, output = tool_call_exchange(traj, tool)
    assert call.tool_calls[0].arguments == arguments
    assert wrote in str(output.content)
    assert traj.messages[-1].content == ANSWER
    assert_token_exact(tmp_path / "gw.db")
    assert list(runs.iterdir()) == [], "the run's folder, the harness's config in it, is removed"
