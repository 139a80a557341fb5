"""Repair trajectories: a failed prefix up to its first error, a note, a successful ending."""

from __future__ import annotations

from functools import cache

import pytest

from episodes import play
from trajforge.curate.repair import RepairSkipped, mistake_note, repair
from trajforge.envs.registry import get_env
from trajforge.policy.check import check_trajectory
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.renderer import ChatRenderer
from trajforge.schema import Message, Role, Task, Trajectory
from trajforge.train.batch import encode_trajectory
from trajforge.triage import Signal, triage

BAD_CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": [[0]]}}</tool_call>'


@cache
def _renderer() -> ChatRenderer:
    return ChatRenderer(load_tokenizer())


def _episodes() -> tuple[Trajectory, Trajectory]:
    """A clean expert episode and a failed one: its second turn is a failing call and its
    final answer is wrong."""
    entry = get_env("calculator")
    task = entry.tasks(1, seed=3)[0]

    def faulty(t: Task, messages: list[Message]) -> str | None:
        turn = sum(1 for m in messages if m.role is Role.ASSISTANT)
        reply = BAD_CALL if turn == 1 else entry.expert(t, messages)
        return reply if reply is None or "<tool_call>" in reply else "The answer is -1."

    return play(entry.make, task, entry.expert), play(entry.make, task, faulty)


def test_a_repair_is_the_failed_prefix_a_note_and_the_good_ending_token_exact() -> None:
    good, failed = _episodes()
    verdict = triage(failed)
    assert failed.outcome.reward == 0.0
    assert verdict.signals.get(Signal.TOOL_ERROR) == 1 and verdict.first_error == 4
    fixed = repair(failed, verdict, good, _renderer())
    # The failed prefix through the failing call and its error, unchanged.
    assert fixed.messages[:6] == failed.messages[:6]
    assert fixed.messages[5].content.startswith("Error")
    note = fixed.messages[6]
    assert note.content.startswith(
        "My previous step was a mistake (tool error). Let me correct it."
    )
    assert [c.name for c in note.tool_calls] == [c.name for c in good.messages[4].tool_calls]
    assert note.token_ids is not None and note.token_ids[
        -len(good.messages[4].token_ids or []) :
    ] == (good.messages[4].token_ids)
    assert fixed.messages[-1].content == good.messages[-1].content
    assert fixed.outcome.reward == 1.0
    assert fixed.metadata["repair"] == {
        "failed": failed.id, "good": good.id, "first_error": 4, "parted_at": 4
    }  # fmt: skip
    assert check_trajectory(fixed, _renderer()) == []
    # The loss covers the recovery only: none of the failed prefix's assistant tokens.
    seq = encode_trajectory(fixed)
    prefix_len = sum(len(m.token_ids or []) for m in fixed.messages[:6])
    assert not any(seq.loss_mask[:prefix_len])
    assert sum(seq.loss_mask) == sum(
        len(m.token_ids or []) for m in fixed.messages[6:] if m.role is Role.ASSISTANT
    )


def test_what_cannot_be_repaired_says_why() -> None:
    good, failed = _episodes()
    with pytest.raises(RepairSkipped, match="no first error"):
        repair(good, triage(good), good, _renderer())
    with pytest.raises(RepairSkipped, match="makes the same mistake"):
        repair(failed, triage(failed), failed, _renderer())
    other = good.model_copy(update={"task": good.task.model_copy(update={"id": "other"})})
    with pytest.raises(RepairSkipped, match="not 'other'"):
        repair(failed, triage(failed), other, _renderer())


def test_the_note_names_the_first_error() -> None:
    _, failed = _episodes()
    assert (
        mistake_note(triage(failed))
        == "My previous step was a mistake (tool error). Let me correct it."
    )
