"""The chat turns of a trajectory: roles, tool calls, tool specs, messages, and the rules a
conversation's order follows (OpenAI-chat shaped)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field, field_validator, model_validator

from trajforge.schema.content import (
    Content,
    ImagePart,
    Strict,
    TextPart,
    content_images,
    content_problem,
    content_text,
    parse_parts,
)


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class ToolCall(Strict):
    """A tool call made by the assistant.

    When the model's text could not be parsed into a call, ``parse_error`` says why and ``raw``
    keeps the text; the environment answers such a call with a tool message naming the problem.
    """

    id: str = Field(min_length=1)
    name: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw: str | None = None
    parse_error: str | None = None


class FunctionSpec(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_\-]*$")
    description: str = ""
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}, "required": []}
    )


class ToolSpec(Strict):
    """An OpenAI function-tool schema: ``{"type": "function", "function": {...}}``."""

    type: str = Field(default="function", pattern="^function$")
    function: FunctionSpec

    @property
    def name(self) -> str:
        return self.function.name

    def to_openai(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class Timing(Strict):
    """Wall-clock timing of the work that produced a message (generation or tool execution)."""

    started_at: float
    duration_s: float = Field(ge=0.0)


class Message(Strict):
    role: Role
    content: Content = ""
    """Text, or a list of text and image parts (text-only messages keep a plain string)."""
    reasoning: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    reward: float | None = None
    state_key: str | None = None
    timing: Timing | None = None

    _parse_parts = field_validator("content", mode="before")(parse_parts)

    @model_validator(mode="after")
    def _check_fields(self) -> Message:
        problem = content_problem(self.content)
        if problem:
            raise ValueError(problem)
        if self.logprobs is not None:
            if self.role is not Role.ASSISTANT:
                raise ValueError("logprobs: only assistant messages carry sampled-token logprobs")
            if self.token_ids is None or len(self.token_ids) != len(self.logprobs):
                n_ids = None if self.token_ids is None else len(self.token_ids)
                raise ValueError(
                    f"logprobs: {len(self.logprobs)} logprobs but token_ids has {n_ids} entries"
                )
        if self.tool_calls and self.role is not Role.ASSISTANT:
            raise ValueError(
                f"tool_calls: only assistant messages make tool calls, not {self.role}"
            )
        if self.role is Role.TOOL and not self.tool_call_id:
            raise ValueError("tool_call_id: a tool message must name the call it answers")
        if self.tool_call_id is not None and self.role is not Role.TOOL:
            raise ValueError(f"tool_call_id: only tool messages answer calls, not {self.role}")
        return self

    @property
    def text(self) -> str:
        """The message's text: its content, or its text parts joined by newlines."""
        return content_text(self.content)

    @property
    def images(self) -> list[ImagePart]:
        return content_images(self.content)


def refuse_images(messages: list[Message], consumer: str) -> None:
    """Raise when a message holds an image part: ``consumer`` handles text only and must not
    drop it silently."""
    for i, msg in enumerate(messages):
        if msg.images:
            raise ValueError(
                f"messages[{i}]: {consumer} handles text only and this message has an image part"
            )


def with_system_text(messages: list[Message], text: str) -> list[Message]:
    """``messages`` with ``text`` added to their opening system message (or one put first):
    what an env or a gateway session tells the model beside the task, an experience memory's
    lessons say."""
    if messages and messages[0].role is Role.SYSTEM:
        first = messages[0]
        joined: Content
        if isinstance(first.content, list):
            joined = [*first.content, TextPart(text=text)]
        else:
            joined = f"{first.content}\n\n{text}" if first.content else text
        return [first.model_copy(update={"content": joined}), *messages[1:]]
    return [Message(role=Role.SYSTEM, content=text), *messages]


def check_conversation(messages: list[Message], *, allow_open_calls: bool = False) -> None:
    """Validate role order as OpenAI's chat API does, and that every tool call id is answered by
    exactly one tool message. System, user and assistant messages come in any order (an
    assistant first, several of a role in a row, a system message mid-conversation); tool
    messages answer the calls of the assistant message right before them.

    ``allow_open_calls`` lets the last assistant message keep unanswered calls, which happens
    when an episode is cut off (error, timeout, truncation) while its tools were running.
    """
    open_calls: dict[str, int] = {}
    seen_ids: set[str] = set()
    last_assistant = -1
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        if open_calls and msg.role is not Role.TOOL:
            ids = ", ".join(sorted(open_calls))
            raise ValueError(f"{where}: tool call(s) {ids} were never answered by a tool message")
        prev = messages[i - 1].role if i > 0 else None
        if msg.role is Role.TOOL and prev not in (Role.ASSISTANT, Role.TOOL):
            raise ValueError(f"{where}.role: tool may not follow {prev or 'nothing'}")
        if msg.role is Role.ASSISTANT:
            last_assistant = i
            for j, call in enumerate(msg.tool_calls):
                if call.id in seen_ids:
                    raise ValueError(
                        f"{where}.tool_calls[{j}].id: duplicate tool call id {call.id!r}"
                    )
                seen_ids.add(call.id)
                open_calls[call.id] = i
        elif msg.role is Role.TOOL:
            call_id = msg.tool_call_id or ""
            if call_id not in open_calls:
                state = "was already answered" if call_id in seen_ids else "matches no tool call"
                raise ValueError(f"{where}.tool_call_id: {call_id!r} {state}")
            del open_calls[call_id]
    if open_calls and not (
        allow_open_calls and all(i == last_assistant for i in open_calls.values())
    ):
        ids = ", ".join(sorted(open_calls))
        raise ValueError(f"messages: tool call(s) {ids} were never answered by a tool message")
