"""One answers vocabulary: environments and rule scorers read and normalise answers alike."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trajforge.envs.builtin import search
from trajforge.envs.tool_env import exact_match_verifier
from trajforge.judge.rules import Contains, NormalizedMatch
from trajforge.schema import Message, Role, ToolCall, Trajectory
from trajforge.schema.answers import contains_answer, final_answer, normalize_answer
from trajforge.schema.evidence import Evidence

Make = Callable[..., Trajectory]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer: 1,234.5 Km!", "answer 1234.5 km"),
        ("  The Eiffel   Tower. ", "eiffel tower"),
        ("-3.5 degrees", "-3.5 degrees"),
        ("U.S.-based, well-known", "u s based well known"),
        ("a list: 1,2,3", "list 1 2 3"),
        ("snake_case_name", "snake case name"),
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_contains_answer_matches_whole_words_only() -> None:
    assert contains_answer("So it is 42, I think.", "42")
    assert not contains_answer("It is 1425.", "42")
    assert contains_answer("Answer: PARIS, France", "paris")
    assert not contains_answer("anything", "")


def test_final_answer_is_the_last_reply_without_a_tool_call() -> None:
    call = ToolCall(id="call_0_0", name="f", arguments={})
    user = Message(role=Role.USER, content="q")
    reply = Message(role=Role.ASSISTANT, content="It is 4.")
    calling = Message(role=Role.ASSISTANT, content="Checking.", tool_calls=[call])
    assert final_answer([user, reply]) == "It is 4."
    assert final_answer([user, calling]) is None
    assert final_answer([user]) is None


@pytest.mark.parametrize(
    ("answer", "gold", "verdict"),
    [
        ("The answer is: the Eiffel Tower!", "Eiffel Tower", 1.0),
        ("It is 1,234.", "1234", 1.0),
        ("It is -3.5", "3.5", 0.0),
        ("Big Ben", "Eiffel Tower", 0.0),
    ],
)
async def test_env_verifier_and_rule_scorers_agree(
    make_traj: Make, answer: str, gold: str, verdict: float
) -> None:
    traj = make_traj(answer, gold=gold)
    evidence = Evidence.of(traj)
    assert exact_match_verifier(evidence) == verdict
    assert (await Contains()(traj)).value == verdict
    if answer.startswith("The answer is"):
        assert (await NormalizedMatch()(traj)).value == verdict
        assert search.verify(evidence) == verdict
