"""Context policies: what an episode's prompt holds once its history outgrows a token budget.

``RolloutSpec.context`` (a ``ContextSpec``) names a strategy and a ``budget``: the tokens one
forward may hold, the prompt plus a whole turn's completion. Before each turn whose completion
would not fit, the episode rewrites its history and goes on in a new segment (``resplit.Pieces``)
whose prompt is exactly the rewritten history as the chat template renders it:

- ``keep_last``: the opening (system prompt and task) and the last ``keep_turns`` turns;
- ``shorten_tools``: every tool output but the last ``keep_turns`` turns' cut to ``tool_chars``
  characters (0: dropped, its length said);
- ``summary``: the opening, a user message summarising the older turns (``summary_by: rule``: one
  line per tool call and its result; ``policy``: the rollout's policy asked for a summary in a
  session of its own, which is not recorded) and the last ``keep_turns`` turns;
- ``fold``: the agent's own action, as in "Context as a Tool: Context Management for
  Long-Horizon SWE-Agents": a ``fold`` tool is offered beside the env's, and calling it
  replaces the history with the opening and the summary it wrote (its other calls in that reply
  are not run); an agent that lets its context outgrow the budget without folding is cut;
- ``none``: no rewrite; a turn that would not fit ends the episode.

The budget is never exceeded: a history that still does not fit once rewritten (a task longer
than the budget, a summary too long) ends the episode, truncated, with reason
``context_budget`` and the token counts in its error; nothing is cut silently.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from trajforge.schema import FunctionSpec, Message, Role, ToolSpec

FOLD = "fold"
FOLD_TOOL = ToolSpec(
    function=FunctionSpec(
        name=FOLD,
        description="Replace your conversation so far with a summary you write: the task stays, "
        "everything else is forgotten except this summary. Keep what you still need.",
        parameters={
            "type": "object",
            "properties": {
                "summary": {
                    "type": "string",
                    "description": "What to remember from the work so far.",
                }
            },
            "required": ["summary"],
        },
    )
)
FOLD_REASON = "the agent's fold"
"""Names a fold in the ``exactness.reason`` of the segment it opens (the viewer marks it)."""
SUMMARY_HEADER = "Summary of the earlier turns of this conversation:\n"
FOLD_HEADER = "Your notes from the work so far (you folded the rest of the conversation):\n"
SUMMARISE_PROMPT = (
    "Summarise the following agent transcript for the agent itself: the facts it found, what it "
    "tried and what is left to do. Be brief."
)
_LINE_CHARS = 120


class ContextStrategy(StrEnum):
    NONE = "none"
    KEEP_LAST = "keep_last"
    SHORTEN_TOOLS = "shorten_tools"
    SUMMARY = "summary"
    FOLD = "fold"


class SummaryBy(StrEnum):
    RULE = "rule"
    POLICY = "policy"


class ContextSpec(BaseModel):
    """How an episode's context is managed (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    strategy: ContextStrategy
    """``keep_last``, ``shorten_tools``, ``summary``, ``fold`` (the agent's own tool) or
    ``none`` (a turn that would not fit ends the episode)."""
    budget: int = Field(ge=1)
    """Tokens one forward may hold: the prompt plus a turn's whole completion."""
    keep_turns: int = Field(default=2, ge=0)
    """Latest turns kept whole by ``keep_last``, ``shorten_tools`` and ``summary``."""
    tool_chars: int = Field(default=200, ge=0)
    """Characters ``shorten_tools`` keeps of an older tool output (0: dropped)."""
    summary_by: SummaryBy = SummaryBy.RULE
    """Who writes ``summary``'s summary: ``rule`` (a line per tool call) or the rollout's
    ``policy`` (asked in a session of its own)."""
    summary_tokens: int = Field(default=128, ge=1)
    """Tokens the policy may sample for a summary."""

    @property
    def rewrites(self) -> bool:
        """Whether the engine rewrites the history itself when a turn would not fit."""
        return self.strategy not in (ContextStrategy.NONE, ContextStrategy.FOLD)


def split_turns(
    history: Sequence[Message], opening: int
) -> tuple[list[Message], list[list[Message]]]:
    """What follows the ``opening`` messages: those before the first assistant message (an
    earlier summary) and the turns, each an assistant message and what answered it."""
    carried: list[Message] = []
    turns: list[list[Message]] = []
    for message in history[opening:]:
        if message.role is Role.ASSISTANT:
            turns.append([message])
        elif turns:
            turns[-1].append(message)
        else:
            carried.append(message)
    return carried, turns


def fold_summary(message: Message) -> str | None:
    """The summary of ``message``'s ``fold`` call (``None``: it does not fold)."""
    call = next((c for c in message.tool_calls if c.name == FOLD and c.parse_error is None), None)
    if call is None:
        return None
    summary = call.arguments.get("summary")
    return summary if isinstance(summary, str) else json.dumps(call.arguments)


def rewritten(
    history: Sequence[Message], opening: int, spec: ContextSpec, summary: str | None = None
) -> list[Message]:
    """``history`` as ``spec``'s strategy rewrites it (``summary``: the policy's or the fold's
    summary), every message fresh for the chat template to render."""
    head = list(history[:opening])
    carried, turns = split_turns(history, opening)
    keep = spec.keep_turns
    recent = turns[len(turns) - keep :] if keep else []
    older = turns[: len(turns) - len(recent)]
    if spec.strategy is ContextStrategy.FOLD:
        assert summary is not None, "a fold carries the agent's summary"
        out = [*head, Message(role=Role.USER, content=FOLD_HEADER + summary)]
    elif spec.strategy is ContextStrategy.KEEP_LAST:
        out = [*head, *_flat(recent)]
    elif spec.strategy is ContextStrategy.SHORTEN_TOOLS:
        shortened = [[_shortened(m, spec.tool_chars) for m in turn] for turn in older]
        out = [*head, *carried, *_flat(shortened), *_flat(recent)]
    elif spec.strategy is ContextStrategy.SUMMARY:
        text = summary if summary is not None else rule_summary(carried, older)
        out = [*head, Message(role=Role.USER, content=SUMMARY_HEADER + text), *_flat(recent)]
    else:
        raise ValueError(f"context.strategy: {spec.strategy} does not rewrite the history")
    return [m.model_copy(update={"token_ids": None, "logprobs": None}) for m in out]


def rule_summary(carried: Sequence[Message], turns: Sequence[Sequence[Message]]) -> str:
    """The earlier summary's lines and one line per older tool call (its result cut short) or
    reply without calls."""
    lines = [
        line
        for m in carried
        for line in m.text.removeprefix(SUMMARY_HEADER).splitlines()
        if line.strip()
    ]
    for turn in turns:
        reply, answers = turn[0], {m.tool_call_id: m.text for m in turn[1:] if m.tool_call_id}
        for call in reply.tool_calls:
            args = json.dumps(call.arguments, sort_keys=True)
            lines.append(f"- {call.name}({args}) -> {_cut(answers.get(call.id, ''), _LINE_CHARS)}")
        if not reply.tool_calls:
            lines.append(f"- you said: {_cut(reply.text, _LINE_CHARS)}")
    return "\n".join(lines)


def transcript(messages: Sequence[Message]) -> str:
    """The messages as plain text for a summariser: ``role: text`` and the calls made."""
    lines = []
    for m in messages:
        calls = "".join(f" [{c.name}({json.dumps(c.arguments)})]" for c in m.tool_calls)
        lines.append(f"{m.role.value}: {m.text}{calls}")
    return "\n".join(lines)


def _flat(turns: Sequence[Sequence[Message]]) -> list[Message]:
    return [m for turn in turns for m in turn]


def _shortened(message: Message, chars: int) -> Message:
    if message.role is not Role.TOOL:
        return message
    text = message.text
    if len(text) <= chars and not message.images:
        return message
    return message.model_copy(update={"content": _cut(text, chars)})


def _cut(text: str, chars: int) -> str:
    if len(text) <= chars:
        return text
    return f"{text[:chars]}[... {len(text) - chars} characters dropped]"
