"""Best-of-N selectors: the --select forms, the refusals, and which candidate each keeps."""

from __future__ import annotations

import pytest

from trajforge.errors import ConfigError
from trajforge.judge.selectors import (
    SELECT_JUDGE_NAME,
    Selector,
    SelectorKind,
    check_best_of,
    check_verifier_selectable,
    choose,
    highest,
    mean_logprob,
    most_common,
    parse_selector,
)
from trajforge.schema import (
    Evaluator,
    EvaluatorKind,
    Message,
    Outcome,
    Role,
    Score,
    Task,
    Trajectory,
)

JUDGE = Evaluator(kind=EvaluatorKind.LLM, name=SELECT_JUDGE_NAME)


def candidate(
    index: int,
    answer: str | None = None,
    reward: float | None = None,
    logprobs: list[float] | None = None,
    judged: float | None = None,
) -> Trajectory:
    reply = Message(
        role=Role.ASSISTANT,
        content=answer or "thinking",
        token_ids=list(range(len(logprobs))) if logprobs else None,
        logprobs=logprobs,
    )
    messages = [Message(role=Role.USER, content="q")]
    if answer is not None or logprobs is not None:
        messages.append(reply)
    scores = (
        [Score(name=SELECT_JUDGE_NAME, value=judged, evaluator=JUDGE)] if judged is not None else []
    )
    return Trajectory(
        task=Task(id="t", prompt="q", answer="42"),
        group_id="g",
        sample_index=index,
        messages=messages,
        outcome=Outcome(reward=reward),
        scores=scores,
    )


def test_the_four_forms_parse() -> None:
    assert parse_selector("verifier") == Selector(kind=SelectorKind.VERIFIER)
    assert parse_selector("majority").kind is SelectorKind.MAJORITY
    assert parse_selector("logprob").text == "logprob"
    judge = parse_selector("judge:agentrewardbench")
    assert (judge.kind, judge.criteria, judge.text) == (
        SelectorKind.JUDGE,
        "agentrewardbench",
        "judge:agentrewardbench",
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("best", "--select: unknown selector 'best'; use verifier, judge:CRITERIA, majority"),
        ("judge", "--select: judge needs criteria, judge:CRITERIA"),
        ("judge:", "--select: judge needs criteria"),
        ("majority:3", "--select: majority takes no argument, got 'majority:3'"),
        ("judge:no-such-rubric", "--select: "),
    ],
)
def test_bad_selectors_are_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_selector(text)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_fewer_than_one_sample_is_refused() -> None:
    check_best_of(1)
    with pytest.raises(ConfigError, match=r"^--best-of: must be at least 1, got 0$"):
        check_best_of(0)


def test_a_verifier_that_reads_the_answer_may_not_choose() -> None:
    verifier = parse_selector("verifier")
    check_verifier_selectable(verifier, "keydoor", answer_free=True)
    check_verifier_selectable(parse_selector("logprob"), "calculator", answer_free=False)
    with pytest.raises(ConfigError, match="env 'calculator' reads the task's answer key"):
        check_verifier_selectable(verifier, "calculator", answer_free=False)


def test_verifier_keeps_the_highest_reward() -> None:
    group = [candidate(0, reward=0.0), candidate(1, reward=1.0), candidate(2, reward=1.0)]
    assert choose(parse_selector("verifier"), group) == 1  # the tie goes to the earlier


def test_logprob_keeps_the_most_confident_candidate() -> None:
    group = [
        candidate(0, logprobs=[-2.0, -2.0]),
        candidate(1, logprobs=[-0.1, -0.3]),
        candidate(2),  # no sampled tokens: never preferred
    ]
    assert mean_logprob(group[1]) == pytest.approx(-0.2)
    assert mean_logprob(group[2]) is None
    assert choose(parse_selector("logprob"), group) == 1


def test_majority_keeps_the_first_candidate_with_the_most_common_answer() -> None:
    group = [
        candidate(0, answer="The answer is 41."),
        candidate(1),  # never answered: no vote
        candidate(2, answer="the answer is 42"),
        candidate(3, answer="The answer is 42!"),
    ]
    assert choose(parse_selector("majority"), group) == 2


def test_judge_keeps_the_best_judged_candidate() -> None:
    group = [candidate(0, judged=0.25), candidate(1, judged=1.0), candidate(2)]
    assert choose(parse_selector("judge:agentrewardbench"), group) == 1


def test_ties_and_missing_values_fall_to_the_first() -> None:
    assert highest([None, None]) == 0
    assert highest([None, 0.5, 0.5]) == 1
    assert most_common([None, None]) == 0
    assert most_common(["a", "b", "b", "a"]) == 0
    with pytest.raises(ValueError, match="no candidates"):
        choose(parse_selector("logprob"), [])
