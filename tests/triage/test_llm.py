from __future__ import annotations

import asyncio

import pytest

from episodes import scripted_policy
from trajforge.policy.base import Policy
from trajforge.schema import EvaluatorKind, Message, Task
from trajforge.triage import triage
from trajforge.triage.llm import LLMLocaliser, LocaliserReplyError, parse_location

from .conftest import GOOD, episode

BAD = ("calculator", {"expression": "6*"}, "Error: invalid syntax")


class CannedJudge:
    """A scripted policy replying with the next canned text; ``prompts`` keeps what it read."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.prompts: list[str] = []
        self.policy: Policy = scripted_policy(self._reply)

    def _reply(self, task: Task, messages: list[Message]) -> str:
        self.prompts.append(messages[-1].content)
        return self.replies.pop(0)


def test_a_located_error_becomes_a_score_with_the_step() -> None:
    judge = CannedJudge(['{"first_error": 1, "reason": "the expression was cut short"}'])
    score = asyncio.run(LLMLocaliser(judge.policy)(episode([BAD, GOOD])))
    assert score.name == "triage_llm"
    assert score.value == 0.0
    assert score.dimensions == {"first_error": 1.0}
    assert score.explanation == "the expression was cut short"
    assert score.evaluator.kind is EvaluatorKind.LLM
    assert score.evaluator.model == judge.policy.name
    # The prompt numbers the messages so the judge can name one.
    assert "[1] ASSISTANT" in judge.prompts[0]


def test_no_error_and_a_retry_after_a_bad_reply() -> None:
    judge = CannedJudge(["I think it is fine", '{"first_error": null, "reason": "ok"}'])
    localiser = LLMLocaliser(judge.policy)
    assert asyncio.run(localiser.locate(episode([GOOD]))) is None
    assert localiser.failures == 0


def test_a_step_is_never_guessed() -> None:
    # Index 2 is a tool message, 9 is past the end: neither can be the assistant's error.
    judge = CannedJudge(['{"first_error": 2}', '{"first_error": 9}'])
    localiser = LLMLocaliser(judge.policy)
    score = asyncio.run(localiser(episode([BAD, GOOD])))
    assert score.value is None
    assert score.error is not None and "not an assistant message's index" in score.error
    assert localiser.failures == 1


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("no json", "no JSON"),
        ('{"reason": "x"}', "no first_error"),
        ('{"first_error": true}', "True is not"),
    ],
)
def test_parse_location_refuses_bad_replies(reply: str, problem: str) -> None:
    with pytest.raises(LocaliserReplyError, match=problem):
        parse_location(reply, {1, 3})


def test_the_localiser_is_asked_about_failures_the_rules_blame_no_call_in() -> None:
    assert not triage(episode([GOOD])).unplaced  # a success
    assert not triage(episode([BAD, GOOD], "The answer is 41", reward=0.0)).unplaced
    assert triage(episode([GOOD], "The answer is 41", reward=0.0)).unplaced
    assert triage(episode([GOOD], reward=None)).unplaced  # unscored: not a success
