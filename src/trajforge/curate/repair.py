"""Repair data (Agent-R style revision trajectories): a failed episode up to and including its
first error, then a turn that names the mistake and carries on as a successful episode of the
same task did, from where the two parted.

Token exact: the failed prefix keeps its stored ids, the continuation keeps the successful
episode's stored ids; only the note naming the mistake is new, encoded by the policy's
tokenizer and put in front of the continuation's first assistant turn (two assistant turns in
a row would need a generation prompt no message holds). ``metadata["loss_from_message"]`` is
the index of that turn: training puts the loss on the recovery only (``train.batch``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from trajforge.policy import ChatRenderer
from trajforge.schema import (
    LOSS_FROM_MESSAGE,
    Message,
    Outcome,
    OutcomeStatus,
    Role,
    ToolCall,
    Trajectory,
    is_success,
    new_id,
)
from trajforge.store import TrajectoryFilter, TrajectoryStore
from trajforge.triage import TriageVerdict, triage


class RepairSkipped(ValueError):
    """Why a failed trajectory cannot be repaired with the given successful one."""


def _same(a: Message, b: Message) -> bool:
    calls = [(c.name, c.arguments) for c in a.tool_calls] == [
        (c.name, c.arguments) for c in b.tool_calls
    ]
    return a.role is b.role and a.content == b.content and calls and a.token_ids == b.token_ids


def parted_at(a: list[Message], b: list[Message]) -> int:
    """How many leading messages ``a`` and ``b`` share (role, content, calls and ids)."""
    n = 0
    while n < min(len(a), len(b)) and _same(a[n], b[n]):
        n += 1
    return n


def _end_of_step(messages: list[Message], step: int) -> int:
    """The index after ``step`` and the tool results answering it."""
    end = step + 1
    while end < len(messages) and messages[end].role is Role.TOOL:
        end += 1
    return end


def mistake_note(verdict: TriageVerdict) -> str:
    """The short turn naming the mistake: the first error's signal, in words. Short on purpose
    (the error text itself is already in the context, in the tool's answer): the note and the
    corrected call share one turn's token budget."""
    at = f" @{verdict.first_error}:"
    signal = next((d.split(at, 1)[0] for d in verdict.details if at in d), "")
    what = f" ({signal.replace('_', ' ')})" if signal else ""
    return f"My previous step was a mistake{what}. Let me correct it."


def repair(
    failed: Trajectory, verdict: TriageVerdict, good: Trajectory, renderer: ChatRenderer
) -> Trajectory:
    """The revision trajectory of ``failed`` (triaged as ``verdict``) continued by ``good``.

    Raises:
        RepairSkipped: no first error, the error is not a call (a wrong final reply has no
            observation after it to hold the next turn's prompt), the episodes are of
            different tasks or not tokenized, or ``good`` parts from ``failed`` after the error
            or not at an assistant turn.
    """
    step = verdict.first_error
    if step is None:
        raise RepairSkipped(f"{failed.id}: no first error to repair")
    if not failed.messages[step].tool_calls:
        raise RepairSkipped(f"{failed.id}: its first error is not a tool call")
    if failed.task.id != good.task.id:
        raise RepairSkipped(f"{failed.id}: task {failed.task.id!r}, not {good.task.id!r}")
    if not (failed.is_tokenized and good.is_tokenized):
        raise RepairSkipped(f"{failed.id}: both episodes need token ids")
    part = parted_at(failed.messages, good.messages)
    if part > step or part >= len(good.messages):
        raise RepairSkipped(f"{failed.id}: the successful episode makes the same mistake")
    first = good.messages[part]
    if first.role is not Role.ASSISTANT:
        raise RepairSkipped(
            f"{failed.id}: the successful episode parts from it at a {first.role} message"
        )
    prefix = failed.messages[: _end_of_step(failed.messages, step)]
    note_ids = renderer.tokenizer.encode(mistake_note(verdict) + "\n", add_special_tokens=False)
    ids = list(note_ids) + list(first.token_ids or [])
    turn = sum(1 for m in prefix if m.role is Role.ASSISTANT)
    parsed = renderer.parse(ids, turn)
    rename = {c.id: f"r{turn}_{c.id}" for m in good.messages[part:] for c in m.tool_calls}
    recovery = [
        first.model_copy(
            update={"content": parsed.content, "token_ids": ids, "logprobs": None, "timing": None}
        ),
        *good.messages[part + 1 :],
    ]
    renamed = [_renamed(m, rename) for m in recovery]
    return Trajectory(
        id=new_id(),
        task=failed.task,
        env=failed.env,
        model=failed.model,
        tools=failed.tools,
        messages=[*prefix, *renamed],
        outcome=Outcome(status=good.outcome.status, reward=good.outcome.reward),
        metadata={
            LOSS_FROM_MESSAGE: len(prefix),
            "repair": {
                "failed": failed.id,
                "good": good.id,
                "first_error": step,
                "parted_at": part,
            },
        },
    )


def _renamed(message: Message, rename: dict[str, str]) -> Message:
    """``message`` with its call ids renamed (the prefix may use the same ids; ids are not in
    the rendered text, so the tokens stay as they were)."""
    if message.tool_calls:
        calls = [
            ToolCall.model_validate({**c.model_dump(), "id": rename[c.id]})
            for c in message.tool_calls
        ]
        return message.model_copy(update={"tool_calls": calls})
    if message.tool_call_id is not None:
        return message.model_copy(update={"tool_call_id": rename[message.tool_call_id]})
    return message


@dataclass
class RepairRun:
    """What ``repair_run`` made: the repair trajectories and why the others were skipped."""

    built: list[Trajectory] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


def repair_run(
    store: TrajectoryStore,
    failed: TrajectoryFilter,
    good_run: str | None,
    out_run: str,
    renderer: ChatRenderer,
) -> RepairRun:
    """Repair every failed trajectory ``failed`` selects (triaged as ``trajforge triage`` does)
    with the first successful episode of its task (of ``good_run``, or of any run) that
    parts from it no later than its first error; store the repairs as run ``out_run``, all of
    them or none."""
    made = RepairRun()
    for traj in store.iter_query(failed):
        verdict = triage(traj)
        if verdict.succeeded or verdict.first_error is None:
            continue
        why = "no successful episode of its task"
        where = TrajectoryFilter(
            task=traj.task.id, run=good_run, status=OutcomeStatus.OK, min_reward=1.0
        )
        for good in store.query(where):
            if not is_success(good.outcome.status, good.outcome.reward):
                continue
            try:
                fixed = repair(traj, verdict, good, renderer)
            except RepairSkipped as exc:
                why = str(exc).split(": ", 1)[1]
                continue
            made.built.append(fixed.model_copy(update={"run_id": out_run}))
            break
        else:
            made.skipped[why] += 1
    store.add_many(made.built)
    return made
