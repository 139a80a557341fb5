"""Whether a gateway call continues a recorded trajectory, and the exactness label of one that
does not: ``split`` where it repeats at least one recorded assistant turn and then departs (an
earlier turn edited, the history cut back), or only appends to it but the chat template writes
the recorded turns differently once the new messages follow (``split_at_break``),
``re-rendered`` where it holds assistant turns sent as text that nothing recorded, else
``exact``; and whether a call that continues none rewrites the history the program had
(``keeps_history``, ``rewrite_label``: the next segment of its episode)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trajforge.policy import HistoryRewritten, break_reason
from trajforge.rollout import FOLD_REASON
from trajforge.schema import Exactness, ExactnessKind, Fault, Message, Outcome, OutcomeStatus, Role
from trajforge.serve.wire import call_arguments_text

SPLIT_INTO = "split_into"
"""``metadata["gateway"]`` key of a trajectory split at a template break: the piece after it."""


def _calls(message: Message) -> list[tuple[str, str, Any]]:
    """Each named call as ``(id, name, arguments)``: the parsed object, or the raw text of
    arguments that were no JSON object (frameworks re-serialise JSON, not text)."""
    return [
        (c.id, c.name, c.arguments if c.parse_error is None else call_arguments_text(c))
        for c in message.tool_calls
        if c.name
    ]


def _sent_calls(message: Message) -> list[tuple[str, str, Any]]:
    return [(c.id, c.name, c.arguments if c.parse_error is None else c.raw or "")
            for c in message.tool_calls]  # fmt: skip


def same_message(recorded: Message, sent: Message) -> bool:
    """Whether a message a client sent back is the recorded one (frameworks rewrite
    whitespace around text and re-serialise call arguments, so those are compared as values)."""
    if recorded.role is not sent.role:
        return False
    if recorded.role is Role.ASSISTANT:
        returned = (recorded.text.strip(), _calls(recorded))
        return returned == (sent.text.strip(), _sent_calls(sent))
    return recorded.content == sent.content and recorded.tool_call_id == sent.tool_call_id


def shared_prefix(recorded: list[Message], sent: list[Message]) -> int:
    """How many leading messages of a call repeat a recorded trajectory's."""
    shared = 0
    for r, s in zip(recorded, sent, strict=False):
        if not same_message(r, s):
            break
        shared += 1
    return shared


def departure(recorded: list[Message], sent: list[Message]) -> str | None:
    """How a call departs from a recorded trajectory after repeating at least one of its
    assistant turns (``None``: it repeats none, so it is another conversation)."""
    shared = shared_prefix(recorded, sent)
    if not any(m.role is Role.ASSISTANT for m in recorded[:shared]):
        return None
    if shared < min(len(recorded), len(sent)):
        return f"message {shared} differs from the recorded one (an earlier turn was edited)"
    if shared == len(sent):
        return f"the call goes back to message {shared} of the recorded {len(recorded)}"
    return "the call repeats the recorded trajectory but does not only append answers to it"


def exactness_of(
    recorded: Iterable[tuple[str, list[Message]]], messages: list[Message]
) -> Exactness:
    """The label of a trajectory started from ``messages``, given the recorded trajectories
    (``(id, messages)``, the most recent first) it may depart from."""
    for trajectory_id, recorded_messages in recorded:
        why = departure(recorded_messages, messages)
        if why is not None:
            return Exactness(
                kind=ExactnessKind.SPLIT,
                reason=why,
                split_from=trajectory_id,
                rendered_prefix=len(messages),
            )
    as_text = sum(1 for m in messages if m.role is Role.ASSISTANT)
    if as_text:
        return Exactness(
            kind=ExactnessKind.RE_RENDERED,
            reason=f"{as_text} assistant turn(s) sent as text were rendered by the chat template",
            rendered_prefix=len(messages),
        )
    return Exactness()


def split_at_break(recorded_id: str, exc: HistoryRewritten, messages: list[Message]) -> Exactness:
    """The label of the trajectory a call starts where it appends to trajectory
    ``recorded_id`` but the template rewrites that trajectory's turns (``exc``): it breaks off
    there, its ``messages`` rendered whole as the model is given them."""
    return Exactness(
        kind=ExactnessKind.SPLIT,
        reason=break_reason(exc),
        split_from=recorded_id,
        rendered_prefix=len(messages),
    )


def unanswered_calls(split_into: str | None) -> Outcome:
    """The outcome of a trajectory whose last turn's tool calls it does not answer: the agent's
    failure, unless the answers are in the piece ``split_into`` that broke off after it."""
    if split_into is None:
        return Outcome(
            status=OutcomeStatus.TRUNCATED,
            reason="the agent did not answer the last tool calls",
            fault=Fault.POLICY,
        )
    return Outcome(
        status=OutcomeStatus.TRUNCATED,
        reason=f"its last tool calls are answered in trajectory {split_into}, split off where "
        "the chat template rewrites this one's turns",
    )


def keeps_history(recorded: list[Message], messages: list[Message]) -> bool:
    """Whether a call that does not continue ``recorded`` still keeps its history: it repeats
    every recorded message (and answers not every call of the last reply, one the client never
    saw, or adds replies of its own), or departs at a reply sent back otherwise than it was
    sampled. Neither is the program rewriting its history."""
    shared = shared_prefix(recorded, messages)
    if shared < min(len(recorded), len(messages)):
        return recorded[shared].role is Role.ASSISTANT
    return shared == len(recorded) < len(messages)


def rewrite_label(
    rewritten_id: str, recorded: list[Message], messages: list[Message]
) -> tuple[str, Exactness]:
    """What a call does to the history ``recorded`` of trajectory ``rewritten_id``
    (``compaction``: it keeps none of the recorded turns; ``edit``: it repeats some, then
    departs) and the label of the segment it starts, split from that trajectory, its messages
    rendered whole as the model is given them."""
    why = departure(recorded, messages)
    if why is None:
        kind = "compaction"
        reason = (
            f"context rewritten by {FOLD_REASON}: the program replaced its history with "
            f"{len(messages)} messages that repeat none of the recorded turns (a compaction)"
        )
    else:
        kind, reason = "edit", f"history rewritten by the program: {why}"
    label = Exactness(
        kind=ExactnessKind.SPLIT,
        reason=reason,
        split_from=rewritten_id,
        rendered_prefix=len(messages),
    )
    return kind, label
