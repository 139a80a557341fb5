from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from trajforge.errors import ConfigError
from trajforge.judge.rules import (
    Contains,
    ExactMatch,
    NormalizedMatch,
    NumericMatch,
    RegexMatch,
    TableMatch,
)
from trajforge.judge.scorer import (
    EnvVerdict,
    VerifierScorer,
    get_scorer,
    score_trajectory,
    scorer,
)
from trajforge.schema import EvaluatorKind, Message, Task, Trajectory

Make = Callable[..., Trajectory]


async def test_exact_match(make_traj: Make) -> None:
    assert (await ExactMatch()(make_traj("The answer is 42.", gold="42"))).value == 1.0
    assert (await ExactMatch()(make_traj("The answer is 42 km.", gold="42"))).value == 0.0


async def test_normalized_match_ignores_case_punctuation_and_articles(make_traj: Make) -> None:
    score = await NormalizedMatch()(
        make_traj("The answer is: the Eiffel Tower!", gold="eiffel tower")
    )
    assert score.value == 1.0
    assert (await NormalizedMatch()(make_traj("Big Ben", gold="eiffel tower"))).value == 0.0


@pytest.mark.parametrize(
    ("answer", "gold", "expected"),
    [
        ("The answer is 42 km.", 42, 1.0),
        ("I think it is 1,234.5 dollars", "1234.5", 1.0),
        ("The answer is -3", -3, 1.0),
        ("The answer is 42.0000001", 42, 1.0),
        ("The answer is 43", 42, 0.0),
        ("no idea", 42, 0.0),
        ("From 12 apples we get 7", 7, 1.0),
    ],
)
async def test_numeric_match_with_units_and_tolerance(
    make_traj: Make, answer: str, gold: object, expected: float
) -> None:
    assert (await NumericMatch(rel_tol=1e-6)(make_traj(answer, gold=gold))).value == expected


async def test_episode_ending_on_a_tool_call_has_no_answer(make_traj: Make) -> None:
    score = await NumericMatch()(make_traj(None, calls=[("calculator", {"e": "1"}, "1")]))
    assert score.value == 0.0
    assert "no final answer" in score.explanation


async def test_regex_and_contains(make_traj: Make) -> None:
    assert (await RegexMatch(r"\b4\d\b")(make_traj("It is 42"))).value == 1.0
    assert (await RegexMatch(r"^\d+$")(make_traj("It is 42"))).value == 0.0
    assert (await Contains()(make_traj("Answer: PARIS, France", gold="paris"))).value == 1.0


async def test_table_match_ignores_row_order_but_not_values(make_traj: Make) -> None:
    gold = [["alice", 3], ["bob", 2.5]]
    reordered = make_traj('```json\n[["bob", 2.5], ["Alice", 3.0]]\n```', gold=gold)
    assert (await TableMatch()(reordered)).value == 1.0
    assert (await TableMatch(ordered=True)(reordered)).value == 0.0
    piped = make_traj("bob | 2.5\nalice | 3", gold=gold)
    assert (await TableMatch()(piped)).value == 1.0
    wrong = make_traj('[["bob", 2.5], ["alice", 4]]', gold=gold)
    assert (await TableMatch()(wrong)).value == 0.0
    missing_row = make_traj('[["bob", 2.5]]', gold=gold)
    assert (await TableMatch()(missing_row)).value == 0.0


async def test_env_verifier_recorded_and_rerun(make_traj: Make) -> None:
    traj = make_traj("The answer is 42", reward=1.0)
    assert (await EnvVerdict()(traj)).value == 1.0
    assert (await EnvVerdict()(make_traj("x"))).error == "no outcome reward recorded"
    rerun = VerifierScorer(lambda evidence: 0.25)
    score = await rerun(traj)
    assert score.value == 0.25
    assert score.evaluator.kind is EvaluatorKind.ENV


def test_a_verifier_in_the_older_task_messages_form_is_refused_with_the_fix() -> None:
    def verify(task: Task, messages: list[Message]) -> float:
        return 1.0

    with pytest.raises(
        ConfigError,
        match=r"^verifier 'verify' takes \(task, messages\); a verifier takes one argument, the episode's evidence: def verify\(evidence\)",
    ):
        VerifierScorer(verify)


async def test_an_env_verifier_by_reference_is_a_scorer(tmp_path: Path, make_traj: Make) -> None:
    module = tmp_path / "my_env.py"
    module.write_text(
        "def verify(evidence):\n    return 1.0 if evidence.answer == 'The answer is 42' else 0.0\n"
    )
    found = get_scorer(f"{module}:verify")
    assert isinstance(found, VerifierScorer) and found.name == "verify"
    assert (await found(make_traj("The answer is 42"))).value == 1.0
    assert (await found(make_traj("The answer is 41"))).value == 0.0


async def test_registry_and_decorator(make_traj: Make) -> None:
    assert get_scorer("numeric_match", rel_tol=0.1).rel_tol == 0.1  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="unknown scorer 'nope'"):
        get_scorer("nope")

    @scorer("answer_length", kind=EvaluatorKind.METRIC)
    def answer_length(traj: Trajectory) -> float:
        return float(len(traj.messages[-1].content))

    assert (await get_scorer("answer_length")(make_traj("abcd"))).value == 4.0


async def test_a_raising_scorer_yields_a_failed_score(make_traj: Make) -> None:
    @scorer("broken")
    def broken(traj: Trajectory) -> float:
        raise RuntimeError("boom")

    scores = await score_trajectory(make_traj("The answer is 42"), [broken, NumericMatch()])
    assert scores[0].error == "RuntimeError: boom"
    assert scores[1].value == 1.0
