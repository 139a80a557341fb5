"""The LLM judge end to end with real policy classes: a scripted judge and the embedded model."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trajforge.judge.llm_judge import llm_judge
from trajforge.policy.base import SamplingParams
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.naming import load_policy
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.schema import EvaluatorKind, Trajectory

Make = Callable[..., Trajectory]

VERDICT = '{"success": 1, "side_effects": 0, "repetition": 0, "optimality": 2, "explanation": "used the tool"}'


async def test_scripted_judge_through_the_token_renderer(make_traj: Make) -> None:
    replies = iter(["not a verdict", VERDICT])  # each retry is a fresh session: count calls
    judge_policy = ScriptedPolicy(
        lambda task, messages: next(replies), load_tokenizer(), name="scripted-judge"
    )
    score = await llm_judge("agentrewardbench", judge_policy, max_retries=1)(
        make_traj("The answer is 42", calls=[("calculator", {"expression": "6*7"}, "42")])
    )
    assert score.value == 1.0
    assert score.dimensions["optimality"] == 2.0
    assert score.evaluator.model == "scripted-judge"


@pytest.mark.slow
async def test_embedded_model_judges_end_to_end(make_traj: Make) -> None:
    policy = load_policy("embedded", max_batch_size=2)
    try:
        judge = llm_judge(
            "agentrewardbench",
            policy,
            max_retries=1,
            sampling=SamplingParams(temperature=0.0, max_new_tokens=64),
        )
        score = await judge(
            make_traj("The answer is 42", calls=[("calculator", {"expression": "6*7"}, "42")])
        )
    finally:
        await policy.close()
    assert score.evaluator.kind is EvaluatorKind.LLM
    assert score.evaluator.model == policy.name
    # A 135M model may or may not follow the verdict format; either way the result is a real
    # verdict or a failed score saying why, never a guess.
    if score.value is None:
        assert score.error is not None and "after 2 tries" in score.error
    else:
        assert 0.0 <= score.value <= 1.0
        assert set(score.dimensions) == {"success", "side_effects", "repetition", "optimality"}
