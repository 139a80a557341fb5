from __future__ import annotations

import pytest
from pydantic import ValidationError

from trajforge.schema import (
    Evaluator,
    EvaluatorKind,
    Fault,
    Message,
    Outcome,
    OutcomeStatus,
    Role,
    Score,
    Task,
    ToolCall,
    Trajectory,
    is_infra_failure,
)


def _task() -> Task:
    return Task(id="t1", prompt="What is 2+3?", answer=5)


def _tool_episode() -> list[Message]:
    return [
        Message(role=Role.SYSTEM, content="You can use tools.", token_ids=[1, 2]),
        Message(role=Role.USER, content="What is 2+3?", token_ids=[3, 4]),
        Message(
            role=Role.ASSISTANT,
            content="",
            tool_calls=[
                ToolCall(id="call_0_0", name="calculator", arguments={"expression": "2+3"})
            ],
            token_ids=[5, 6, 7],
            logprobs=[-0.1, -0.2, -0.3],
        ),
        Message(
            role=Role.TOOL, content="5", tool_call_id="call_0_0", name="calculator", token_ids=[8]
        ),
        Message(role=Role.ASSISTANT, content="The answer is 5.", token_ids=[9], logprobs=[-0.5]),
    ]


def test_valid_tool_episode_round_trips_through_json() -> None:
    traj = Trajectory(task=_task(), messages=_tool_episode(), outcome=Outcome(reward=1.0))
    again = Trajectory.model_validate_json(traj.model_dump_json())
    assert again == traj
    assert again.is_tokenized
    assert again.num_turns == 2
    assert again.num_tokens == 9


def test_unknown_fields_are_rejected_except_under_metadata() -> None:
    data = Trajectory(task=_task(), messages=_tool_episode()).model_dump()
    data["metadata"] = {"anything": {"goes": [1, 2]}}
    Trajectory.model_validate(data)
    data["surprise"] = 1
    with pytest.raises(ValidationError, match="surprise"):
        Trajectory.model_validate(data)
    data.pop("surprise")
    data["messages"][1]["colour"] = "red"
    with pytest.raises(ValidationError, match="colour"):
        Trajectory.model_validate(data)


def test_unanswered_tool_call_is_refused() -> None:
    messages = _tool_episode()
    del messages[3]
    with pytest.raises(ValidationError, match=r"call_0_0.*never answered"):
        Trajectory(task=_task(), messages=messages)


def test_unanswered_call_in_last_turn_allowed_only_when_cut_off() -> None:
    messages = _tool_episode()[:3]
    with pytest.raises(ValidationError, match="never answered"):
        Trajectory(task=_task(), messages=messages)
    cut = Trajectory(task=_task(), messages=messages, outcome=Outcome(status=OutcomeStatus.TIMEOUT))
    assert cut.outcome.status is OutcomeStatus.TIMEOUT


def test_tool_call_answered_twice_is_refused() -> None:
    messages = _tool_episode()
    messages.insert(4, messages[3].model_copy())
    with pytest.raises(ValidationError, match="already answered"):
        Trajectory(task=_task(), messages=messages)


def test_tool_message_for_unknown_call_is_refused() -> None:
    messages = _tool_episode()
    messages[3] = messages[3].model_copy(update={"tool_call_id": "nope"})
    with pytest.raises(ValidationError, match="matches no tool call"):
        Trajectory(task=_task(), messages=messages)


def test_duplicate_tool_call_ids_are_refused() -> None:
    call = ToolCall(id="c", name="f")
    msg = Message(role=Role.ASSISTANT, tool_calls=[call, call])
    with pytest.raises(ValidationError, match="duplicate tool call id"):
        Trajectory(task=_task(), messages=[Message(role=Role.USER, content="hi"), msg])


@pytest.mark.parametrize(
    ("roles", "error"),
    [
        (["user", "tool"], "tool may not follow user"),
        (["system", "tool"], "tool may not follow system"),
        (["tool"], "tool may not follow nothing"),
    ],
)
def test_illegal_role_orders_are_refused(roles: list[str], error: str) -> None:
    messages = [
        Message(role=Role(r), content="x", tool_call_id="c" if r == "tool" else None) for r in roles
    ]
    with pytest.raises(ValidationError, match=error):
        Trajectory(task=_task(), messages=messages)


@pytest.mark.parametrize(
    "roles",
    [
        ["assistant"],
        ["assistant", "user"],
        ["system", "assistant", "user"],
        ["system", "system", "user"],
        ["user", "assistant", "assistant"],
        ["user", "user", "assistant"],
        ["user", "system", "assistant", "system", "user"],
    ],
)
def test_role_orders_openai_takes_are_valid(roles: list[str]) -> None:
    messages = [Message(role=Role(r), content="x") for r in roles]
    assert Trajectory(task=_task(), messages=messages).messages == messages


def test_token_ids_and_logprobs_must_have_equal_length() -> None:
    with pytest.raises(ValidationError, match="2 logprobs but token_ids has 3"):
        Message(role=Role.ASSISTANT, token_ids=[1, 2, 3], logprobs=[-1.0, -1.0])
    with pytest.raises(ValidationError, match="only assistant"):
        Message(role=Role.USER, token_ids=[1], logprobs=[-1.0])


def test_a_score_needs_a_value_or_an_error() -> None:
    evaluator = Evaluator(kind=EvaluatorKind.LLM, model="judge")
    with pytest.raises(ValidationError, match="needs a value"):
        Score(name="success", evaluator=evaluator)
    failed = Score(name="success", evaluator=evaluator, error="unparsable verdict after 3 tries")
    assert failed.value is None


def test_incompatible_major_schema_version_is_refused() -> None:
    with pytest.raises(ValidationError, match="major versions differ"):
        Trajectory(task=_task(), schema_version="2.0.0")


def test_a_trajectory_stored_before_the_fault_field_reads_as_no_infra_failure() -> None:
    stored = {
        "id": "old",
        "schema_version": "1.0.0",
        "task": {"id": "t1", "prompt": "What is 2+3?"},
        "outcome": {"status": "error", "reward": None, "error": "boom", "reason": "env_error"},
    }
    old = Trajectory.model_validate(stored)
    assert old.outcome.fault is None and not is_infra_failure(old)
    lost = old.model_copy(
        update={"outcome": Outcome(status=OutcomeStatus.ERROR, fault=Fault.INFRA)}
    )
    assert is_infra_failure(lost)
    text = lost.model_dump_json()
    assert '"fault":"infra"' in text and is_infra_failure(Trajectory.model_validate_json(text))
    assert not is_infra_failure(
        old.model_copy(
            update={"outcome": Outcome(status=OutcomeStatus.TRUNCATED, fault=Fault.POLICY)}
        )
    )
    with pytest.raises(ValidationError, match="fault"):
        Outcome(status=OutcomeStatus.ERROR, fault="network")
