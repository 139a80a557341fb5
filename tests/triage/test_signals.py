from __future__ import annotations

from trajforge.schema import (
    Message,
    Outcome,
    OutcomeStatus,
    Role,
    Task,
    Timing,
    ToolCall,
    Trajectory,
)
from trajforge.schema.trajectory import Fault
from trajforge.triage import Signal, TriageOptions, triage

from .conftest import GOOD, episode


def test_a_clean_episode_has_no_signal_and_no_first_error() -> None:
    verdict = triage(episode([GOOD]))
    assert verdict.signals == {}
    assert verdict.first_error is None
    assert verdict.clean


def test_a_tool_error_points_at_the_call_that_failed() -> None:
    bad = ("calculator", {"expression": "6*"}, "Error: invalid syntax in '6*'")
    verdict = triage(episode([GOOD, bad, GOOD]))
    assert verdict.signals == {Signal.TOOL_ERROR: 1}
    assert verdict.first_error == 3


def test_a_loop_starts_at_the_first_identical_repeat() -> None:
    verdict = triage(episode([("calculator", {"expression": "1+1"}, "2"), GOOD, GOOD, GOOD]))
    assert verdict.signals == {Signal.LOOP: 1}
    assert verdict.first_error == 5


def test_a_repeat_with_a_new_result_or_below_the_threshold_is_no_loop() -> None:
    moving = [("move", {"d": "up"}, f"at row {k}") for k in range(4)]
    assert Signal.LOOP not in triage(episode(moving, tools=[])).signals
    assert Signal.LOOP not in triage(episode([GOOD, GOOD])).signals
    looser = TriageOptions(loop_repeats=2)
    assert triage(episode([GOOD, GOOD]), looser).first_error == 3


def test_malformed_calls_unparsable_unknown_tool_or_missing_argument() -> None:
    unparsable = ToolCall(id="c9", raw="<tool_call>{", parse_error="invalid JSON")
    unknown = ("calculate", {"expression": "6*7"}, "Error: no tool named calculate")
    missing = ("calculator", {}, "Error: missing argument expression")
    for calls in ([GOOD, unparsable], [GOOD, unknown], [GOOD, missing]):
        verdict = triage(episode(calls))
        assert Signal.MALFORMED_CALL in verdict.signals
        assert verdict.first_error == 3
    # A malformed call's error result is not counted twice as a tool error.
    assert Signal.TOOL_ERROR not in triage(episode([unparsable])).signals


def test_truncation_and_context_overflow_are_told_apart() -> None:
    cut = episode([GOOD, GOOD], None, status=OutcomeStatus.TRUNCATED, reason="max_turns")
    full = episode([GOOD], None, status=OutcomeStatus.TRUNCATED, reason="max_context_tokens")
    assert set(triage(cut).signals) >= {Signal.TRUNCATED, Signal.NO_FINAL_ANSWER}
    assert Signal.CONTEXT_OVERFLOW in triage(full).signals
    assert Signal.TRUNCATED not in triage(full).signals
    assert triage(cut).first_error == 3


def test_no_final_answer_unless_the_env_ended_on_a_successful_call() -> None:
    failed = episode([GOOD], None, reward=0.0)
    assert triage(failed).signals == {Signal.NO_FINAL_ANSWER: 1}
    assert triage(failed).first_error == 1
    assert triage(episode([GOOD], None, reward=1.0)).signals == {}


def test_an_answer_without_the_needed_tool() -> None:
    verdict = triage(episode([]))
    assert verdict.signals == {Signal.ANSWER_WITHOUT_TOOL: 1}
    assert verdict.first_error == 1
    failing = ("calculator", {"expression": "6*"}, "Error: bad")
    assert Signal.ANSWER_WITHOUT_TOOL in triage(episode([failing])).signals
    # The task says which tool it needs: another tool's success is not enough.
    traj = episode([GOOD])
    traj.task.metadata["required_tools"] = ["search"]
    assert Signal.ANSWER_WITHOUT_TOOL in triage(traj).signals


def test_a_wrong_answer_is_the_last_reply_and_contradictions_are_flagged() -> None:
    wrong = episode([GOOD], "The answer is 41", reward=0.0)
    verdict = triage(wrong)
    assert verdict.signals == {Signal.WRONG_ANSWER: 1}
    assert verdict.first_error == 3
    # The answer holds the gold answer but the verifier failed it: the reward contradicts it.
    odd = triage(episode([GOOD], "The answer is 42", reward=0.0))
    assert Signal.REWARD_CONTRADICTION in odd.signals
    lucky = triage(episode([GOOD], "The answer is 7", reward=1.0))
    assert set(lucky.signals) == {Signal.REWARD_CONTRADICTION}
    assert lucky.first_error is None  # not a policy mistake: nothing to blame a step for


def test_a_slow_tool_is_reported_without_blaming_a_step() -> None:
    traj = episode([GOOD])
    traj.messages[2].timing = Timing(started_at=0.0, duration_s=45.0)
    verdict = triage(traj)
    assert verdict.signals == {Signal.SLOW_TOOL: 1}
    assert verdict.first_error is None
    assert triage(traj, TriageOptions(slow_tool_s=60)).signals == {}


def test_an_infra_failure_is_not_the_policys() -> None:
    traj = episode([GOOD], None, reward=None, status=OutcomeStatus.ERROR)
    traj.outcome.fault = Fault.INFRA
    traj.outcome.error = "the calculator server crashed"
    verdict = triage(traj)
    assert verdict.signals == {Signal.INFRA_FAILURE: 1}
    assert verdict.first_error is None


def test_bare_trajectories_get_the_signals_that_apply() -> None:
    # No tools, no tool calls, no reward, an env nobody knows, no gold answer.
    chat = Trajectory(
        task=Task(id="x", prompt="hi", env="nowhere"),
        env="nowhere",
        messages=[
            Message(role=Role.USER, content="hi"),
            Message(role=Role.ASSISTANT, content="hello"),
        ],
    )
    assert triage(chat).signals == {}
    empty = Trajectory(task=Task(id="y", prompt="hi"), outcome=Outcome(reward=0.0))
    verdict = triage(empty)
    assert verdict.signals == {Signal.NO_FINAL_ANSWER: 1}
    assert verdict.first_error is None


def test_the_first_error_is_the_earliest_policy_signal() -> None:
    bad = ("calculator", {"expression": "6*"}, "Error: invalid syntax")
    verdict = triage(episode([bad, GOOD, GOOD, GOOD], "The answer is 41", reward=0.0))
    assert set(verdict.signals) == {Signal.TOOL_ERROR, Signal.LOOP, Signal.WRONG_ANSWER}
    assert verdict.first_error == 1
    assert verdict.details[0].startswith("tool_error @1: calculator: Error: invalid syntax")
