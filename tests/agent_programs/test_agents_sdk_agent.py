"""``examples/agents_sdk_rl/agent.py``, a calculator agent on the OpenAI Agents SDK, run through
the gateway: the SDK's loop of calls (its own history sent back each turn, the tool results its
``FunctionTool`` computed) is one token-exact trajectory the env's verifier scores."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from serve_helpers import MODEL, assert_token_exact, recorded

from trajforge.agent_programs import AgentRunner
from trajforge.envs.builtin.arith import format_number, safe_eval
from trajforge.envs.builtin.calculator import (
    SYSTEM_PROMPT,
    calculator,
    expert,
    generate_tasks,
)
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.rollout import RolloutSpec, run_rollout
from trajforge.schema import EvaluatorKind, OutcomeStatus, Role
from trajforge.serve.gateway import Gateway

pytest.importorskip("agents", reason="the OpenAI Agents SDK (openai-agents, the dev extra)")

SDK_AGENT = (
    f"{sys.executable} {Path(__file__).parents[2] / 'examples' / 'agents_sdk_rl' / 'agent.py'}"
)


def test_the_agents_sdk_calculator_agent_is_one_token_exact_verified_trajectory(
    tmp_path: Path,
) -> None:
    # The calculator's expert as the model: one tool call per step, then the answer.
    gateway = Gateway(ScriptedPolicy(expert, load_tokenizer(), name=MODEL), None, run_id="")
    tasks = generate_tasks(2, seed=3)
    store = tmp_path / "sdk.db"
    spec = RolloutSpec(env="calculator", tasks=tasks, run_id="gw", store=store)
    runs = run_rollout(spec, runner=AgentRunner(SDK_AGENT, gateway=gateway))
    assert [r.outcome.status for r in runs] == [OutcomeStatus.OK] * 2
    stored = {t.task.id: t for t in recorded(store)}
    assert sorted(stored) == sorted(t.id for t in tasks)
    for task in tasks:
        t = stored[task.id]
        steps = task.data["steps"]
        # One trajectory per run: every call of the SDK's loop continued the one before.
        assert t.num_turns == len(steps) + 1
        assert [m.role for m in t.messages[:2]] == [Role.SYSTEM, Role.USER]
        assert t.messages[0].content == SYSTEM_PROMPT and t.messages[1].content == task.prompt
        results = [m.content for m in t.messages if m.role is Role.TOOL]
        assert results == [format_number(safe_eval(s)) for s in steps]
        assert t.messages[-1].content == f"The answer is {format_number(task.answer)}."
        # The schema the env's demonstrations carry, so the prompt is the one SFT trained on.
        assert t.tools == [calculator.spec]
        client = t.metadata["gateway"]["client"]
        assert (client["name"], client["version"]) == ("Agents/Python", "0.24.0")
        (score,) = t.scores
        assert score.evaluator.kind is EvaluatorKind.ENV and t.reward == score.value == 1.0
    assert_token_exact(store)
