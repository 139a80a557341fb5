"""RL through a harness: ``examples/agents_sdk_rl/agent.py``, a calculator agent written with the
OpenAI Agents SDK, plays the RL step's episodes through the gateway over the policy being
trained, and the SDK's calls are what it trains on."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import torch
from train_helpers import small_rl_config, token_id_rubric
from typer.testing import CliRunner

from trajforge.agent_programs import agent_runners
from trajforge.cli.main import app
from trajforge.envs.builtin.calculator import make_env
from trajforge.judge.scorer import VerifierScorer
from trajforge.schema import EvaluatorKind, OutcomeStatus
from trajforge.store import TrajectoryStore
from trajforge.train.rl import RLTrainer

pytest.importorskip("agents", reason="the OpenAI Agents SDK (openai-agents, the dev extra)")

SDK_AGENT = (
    f"{sys.executable} {Path(__file__).parents[2] / 'examples' / 'agents_sdk_rl' / 'agent.py'}"
)


@pytest.mark.slow
def test_an_rl_step_runs_through_an_agents_sdk_agent(tmp_path: Path) -> None:
    store = tmp_path / "rl.db"
    # Two turns of up to 64 tokens: room for the SDK's loop to send its own history back.
    cfg = small_rl_config(
        tmp_path / "out",
        model={"spec": "tiny"},
        agent=SDK_AGENT,
        agent_timeout_s=120,
        store=store,
        max_turns=2,
        max_new_tokens=64,
    )
    # The env's verdict plus a spread of the token ids, so that the tiny model's groups differ
    # and the step trains.
    trainer = RLTrainer(
        cfg, rubric=token_id_rubric(), agent_runner=agent_runners(cfg.agent, cfg.env)
    )
    before = {n: p.detach().clone() for n, p in trainer.parts.model.named_parameters()}
    (step,) = trainer.train().history
    assert "loss" in step
    changed = any(not torch.equal(p, before[n]) for n, p in trainer.parts.model.named_parameters())
    assert changed
    with TrajectoryStore(store) as db:
        trajs = db.query(run="rl-out-step1")
        meta = db.get_run("rl-out-step1")
    assert meta is not None and meta["agent"] == SDK_AGENT and meta["harness"] is None
    assert len(trajs) == 4 and len({t.group_id for t in trajs}) == 2
    verifier = VerifierScorer(make_env().verifier)
    for t in trajs:
        assert t.outcome.status in {OutcomeStatus.OK, OutcomeStatus.TRUNCATED}, t.outcome
        client = t.metadata["gateway"]["client"]
        assert client["name"] == "Agents/Python" and client["version"] == "0.24.0"
        assert t.metadata["gateway"]["temperatures"][0] == cfg.temperature
        assert t.tools[0].name == "calculator" and t.messages[0].content.startswith("Use the")
        (score,) = t.scores
        assert score.evaluator.kind == EvaluatorKind.ENV
        assert t.reward == score.value == asyncio.run(verifier(t)).value
    checked = CliRunner().invoke(app, ["check", "--store", str(store), "--run", "rl-out-step1"])
    assert checked.exit_code == 0, checked.output
