from __future__ import annotations

from collections.abc import Callable

from trajforge.judge.process import ProcessScorer, process_metrics
from trajforge.schema import Message, Role, ToolCall, Trajectory

Make = Callable[..., Trajectory]


def test_clean_expert_like_trajectory(make_traj: Make) -> None:
    traj = make_traj("The answer is 42", calls=[("calculator", {"expression": "6*7"}, "42")])
    m = process_metrics(traj, expert_turns=2)
    assert (m.turns, m.tool_calls) == (2, 1)
    assert m.invalid_tool_call_rate == 0.0
    assert m.tool_error_rate == 0.0
    assert m.step_overhead == 0.0
    assert not m.looped
    assert not m.answer_without_evidence


def test_loop_of_identical_calls_is_detected(make_traj: Make) -> None:
    same = ("calculator", {"expression": "6*7"}, "42")
    traj = make_traj("The answer is 42", calls=[same, same, same, same])
    m = process_metrics(traj, expert_turns=2)
    assert m.max_repeated_calls == 4
    assert m.looped
    assert m.step_overhead == 1.5


def test_tool_errors_and_answer_without_evidence(make_traj: Make) -> None:
    traj = make_traj(
        "The answer is 42",
        calls=[("calculator", {"expression": "6*"}, "Error: invalid syntax in '6*'")],
    )
    m = process_metrics(traj)
    assert m.tool_error_rate == 1.0
    assert m.answer_without_evidence
    assert m.step_overhead is None
    assert process_metrics(make_traj("The answer is 42")).answer_without_evidence


def test_invalid_tool_call_rate_counts_parse_errors(make_traj: Make) -> None:
    traj = make_traj("The answer is 42", calls=[("calculator", {"expression": "6*7"}, "42")])
    bad = ToolCall(id="call_9_0", raw="<tool_call>{oops", parse_error="invalid JSON")
    messages = list(traj.messages)
    messages[1:1] = [
        Message(role=Role.ASSISTANT, tool_calls=[bad]),
        Message(role=Role.TOOL, content="Error: invalid JSON", tool_call_id="call_9_0"),
    ]
    traj = traj.model_copy(update={"messages": messages})
    m = process_metrics(traj)
    assert m.invalid_tool_call_rate == 0.5
    assert m.tool_error_rate == 0.5


async def test_process_scorer_summarises(make_traj: Make) -> None:
    same = ("calculator", {"expression": "1"}, "1")
    score = await ProcessScorer()(make_traj("The answer is 1", calls=[same] * 3))
    assert score.value == 0.0
    assert "repeated 3x" in score.explanation
    assert score.dimensions["tool_calls"] == 3.0
    clean = await ProcessScorer()(make_traj("The answer is 1", calls=[same]))
    assert clean.value == 1.0
