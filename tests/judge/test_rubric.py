"""Rubrics (weighted scorers) and user scorers loaded as ``module:function`` / ``file.py:f``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from trajforge.errors import ConfigError
from trajforge.judge import Rubric, ScorerRef, evaluate, get_scorer, scorer_names
from trajforge.judge.rules import NumericMatch
from trajforge.judge.scorer import FunctionScorer, VerifierScorer
from trajforge.schema import EvaluatorKind, OutcomeStatus, Trajectory
from trajforge.schema.evidence import Evidence

Make = Callable[..., Trajectory]

USER_SCORERS = '''
import asyncio

from trajforge.judge.rules import NumericMatch
from trajforge.schema import Evaluator, EvaluatorKind, Score

NOT_A_FUNCTION = 3


def exact_total(trajectory):
    """1.0 when the last message says the gold total."""
    return float(trajectory.messages[-1].content == f"Total: {trajectory.task.answer}")


async def slow_length(trajectory):
    await asyncio.sleep(0)
    return Score(
        name="length",
        value=len(trajectory.messages) / 10,
        evaluator=Evaluator(kind=EvaluatorKind.METRIC, name="length"),
    )


class Tolerant(NumericMatch):
    name = "tolerant"
'''


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_scorers.py"
    path.write_text(USER_SCORERS)
    return path


async def test_user_function_scorers_load_from_a_file(make_traj: Make, user_file: Path) -> None:
    exact = get_scorer(f"{user_file}:exact_total")
    assert exact.name == "exact_total"
    assert (await exact(make_traj("Total: 42", gold=42))).value == 1.0
    assert (await exact(make_traj("Total: 41", gold=42))).value == 0.0
    length = await get_scorer(f"{user_file}:slow_length")(make_traj("x"))
    assert (length.name, length.value) == ("length", 0.2)
    tolerant = get_scorer(f"{user_file}:Tolerant", rel_tol=0.1)
    assert isinstance(tolerant, NumericMatch) and tolerant.rel_tol == 0.1
    assert (await tolerant(make_traj("The answer is 45", gold=42))).value == 1.0


async def test_user_scorers_load_from_a_module(
    make_traj: Make, user_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(user_file.parent))
    monkeypatch.delitem(sys.modules, "my_scorers", raising=False)
    exact = get_scorer("my_scorers:exact_total")
    assert (await exact(make_traj("Total: 42", gold=42))).value == 1.0


@pytest.mark.parametrize(
    ("attr", "options", "message"),
    [
        ("missing", {}, "has no attribute 'missing'"),
        ("NOT_A_FUNCTION", {}, "NOT_A_FUNCTION is a int, not a function"),
        ("exact_total", {"x": 1}, "exact_total takes no options"),
        ("Tolerant", {"nope": 1}, "bad options"),
    ],
)
def test_bad_user_scorers_are_config_errors(
    user_file: Path, attr: str, options: dict[str, int], message: str
) -> None:
    with pytest.raises(ConfigError, match=f"^scorer '.*my_scorers.py:{attr}': .*{message}"):
        get_scorer(f"{user_file}:{attr}", **options)


def test_unknown_scorer_suggests_the_closest_name() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown scorer 'numeric_mach' \(did you mean 'numeric_match'\?\)"
    ):
        get_scorer("numeric_mach")
    assert {"env_verifier", "process", "numeric_match"} <= set(scorer_names())


async def test_rubric_is_the_weighted_sum_and_keeps_every_verdict(
    make_traj: Make, user_file: Path
) -> None:
    def boom(trajectory: Trajectory) -> float:
        raise RuntimeError("boom")

    rubric = Rubric.from_refs(
        [
            "numeric_match",
            ScorerRef(name=f"{user_file}:exact_total", weight=0.5),
            {"name": "env_verifier", "weight": 2.0},  # type: ignore[list-item]
        ]
    )
    rubric.items.append((FunctionScorer(boom, "boom", EvaluatorKind.RULE), 10.0))
    traj = make_traj("Total: 42", gold=42, reward=0.25)
    total, scores = await rubric.evaluate(traj)
    assert [s.name for s in scores] == ["numeric_match", "exact_total", "env_verifier", "boom"]
    assert total == pytest.approx(1.0 + 0.5 + 2 * 0.25)  # the failed scorer counts 0
    assert scores[-1].error == "RuntimeError: boom"
    score = await rubric(traj)
    assert score.value == pytest.approx(2.0) and "failed: boom" in score.explanation
    assert score.dimensions == {"numeric_match": 1.0, "exact_total": 1.0, "env_verifier": 0.25}


@pytest.mark.parametrize(
    ("reward", "status", "value"),
    [
        (1.0, OutcomeStatus.OK, 1.0),
        (0.0, OutcomeStatus.OK, 0.0),
        (-1.0, OutcomeStatus.OK, 0.0),  # a wrong final action scores as a timeout does
        (1.0, OutcomeStatus.TRUNCATED, 0.0),  # a cut-off episode never succeeded
    ],
)
async def test_env_success_is_the_verdict_as_success_or_failure(
    make_traj: Make, reward: float, status: OutcomeStatus, value: float
) -> None:
    traj = make_traj("done", reward=reward)
    traj.outcome.status = status
    score = await get_scorer("env_success")(traj)
    assert score.value == value and score.error is None


async def test_env_success_without_a_verdict_is_an_error_not_a_failure(make_traj: Make) -> None:
    score = await get_scorer("env_success")(make_traj("done"))
    assert score.value is None and score.error == "no outcome reward recorded"


async def test_env_verifier_reruns_an_evidence_verifier_on_a_stored_trajectory(
    make_traj: Make,
) -> None:
    seen: list[Evidence] = []

    def verifier(evidence: Evidence) -> float:
        seen.append(evidence)
        return 0.75 if evidence.answer == "The answer is 42" else 0.0

    score = await VerifierScorer(verifier)(make_traj("The answer is 42", reward=0.0))
    assert (score.value, score.explanation, score.name) == (0.75, "re-verified", "reverified")
    assert seen[0].state == {}  # tool state is not stored with a trajectory


async def test_the_eval_recipe_with_a_rubric_summarises_its_totals(make_traj: Make) -> None:
    # RL validation's path: the rubric's weighted totals are the rewards summarised.
    rubric = Rubric.from_refs(["numeric_match", {"name": "env_verifier", "weight": 2.0}])  # type: ignore[list-item]
    trajs = [make_traj("Total: 42", gold=42, reward=0.25), make_traj("Total: 7", gold=42, reward=0)]
    evaluation = await evaluate(trajs, rubric, close=False)
    assert evaluation.summary.reward_mean == pytest.approx((1.5 + 0.0) / 2)
    assert [s.name for s in evaluation.trajectories[0].scores][-2:] == [
        "numeric_match",
        "env_verifier",
    ]
    with pytest.raises(ValueError, match="rubric's totals are not stored"):
        await evaluate(trajs, rubric, store=object())  # type: ignore[arg-type]
