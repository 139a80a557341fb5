"""The conversation state of an OpenAI-compatible chat endpoint, with token ids when it has them.

The server renders prompts itself, so token ids can only come from the server. When a response
carries the prompt's token ids and the sampled ids (vLLM's ``return_token_ids``, or logprobs
with ``token_id:N`` tokens), the session checks that the new prompt starts with exactly the
context it already holds (earlier prompts plus sampled ids) and gives the difference to the
messages added since the last turn: the last of them holds the whole delta (the server does
not say where one message's ids end), the others hold none. Anything else (no ids, or a server
that re-rendered earlier turns differently from what was sampled) makes the session text-only:
``text_only`` is set, ``text_only_reason`` says why, and no message keeps token ids or logprobs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from trajforge.formats import content_to_openai
from trajforge.policy.base import ChatSession
from trajforge.schema import Message, Role, Task, ToolSpec

CHARS_PER_TOKEN = 4
"""Estimate used for ``num_tokens`` where the server reported no count."""


class OpenAISession(ChatSession):
    """Messages of a conversation with a chat-completions endpoint (no tokenizer needed)."""

    def __init__(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], *, task: Task | None = None
    ) -> None:
        self.messages = [
            m.model_copy(update={"token_ids": None, "logprobs": None}) for m in messages
        ]
        self.tools = list(tools)
        self.task = task
        self.text_only = False
        self.text_only_reason: str | None = None
        self._context: list[int] | None = []
        self._unassigned = 0
        self._counted_tokens = 0
        self._counted_messages = 0
        self._raw: dict[int, dict[str, Any]] = {}

    @property
    def num_tokens(self) -> int:
        """Exact when the server reports token ids; otherwise its last usage count plus an
        estimate (``CHARS_PER_TOKEN``) for the messages added since."""
        if self._context is not None and not self.text_only and self._context:
            return len(self._context) + _estimate(self.messages[self._unassigned :])
        return self._counted_tokens + _estimate(self.messages[self._counted_messages :])

    def add_observations(self, observations: Sequence[Message]) -> list[Message]:
        added = [m.model_copy(update={"token_ids": None, "logprobs": None}) for m in observations]
        self.messages.extend(added)
        return added

    def payload(self) -> list[dict[str, Any]]:
        """The conversation as OpenAI chat messages; assistant turns this session received are
        sent back exactly as the server returned them (with this session's call ids)."""
        return [self._raw.get(i) or _to_openai(m) for i, m in enumerate(self.messages)]

    def add_reply(
        self,
        message: Message,
        raw: dict[str, Any],
        *,
        prompt_ids: list[int] | None,
        usage_tokens: int | None,
    ) -> Message:
        """Append the assistant reply. ``message.token_ids``/``logprobs`` are the sampled ids
        (or None); ``prompt_ids`` the ids of the prompt the server rendered (or None)."""
        if usage_tokens is not None:
            self._counted_tokens = usage_tokens
            self._counted_messages = len(self.messages) + 1
        sampled = message.token_ids
        if not self.text_only:
            if sampled is None or prompt_ids is None:
                self.mark_text_only("the server returned no token ids")
            elif self._context is not None and prompt_ids[: len(self._context)] != self._context:
                self.mark_text_only(
                    "the server's prompt does not extend the previous context token for token "
                    "(it re-rendered an earlier turn differently from what was sampled)"
                )
            else:
                self._assign(prompt_ids)
                if not self.text_only:
                    self._context = [*prompt_ids, *sampled]
        if self.text_only:
            message = message.model_copy(update={"token_ids": None, "logprobs": None})
        self._raw[len(self.messages)] = raw
        self.messages.append(message)
        self._unassigned = len(self.messages)
        return message

    def mark_text_only(self, reason: str) -> None:
        """Drop every token id: the trajectory is for evaluation only, not for training."""
        self.text_only = True
        self.text_only_reason = reason
        self._context = None
        for message in self.messages:
            message.token_ids = None
            message.logprobs = None

    def _assign(self, prompt_ids: list[int]) -> None:
        assert self._context is not None
        delta = prompt_ids[len(self._context) :]
        fresh = self.messages[self._unassigned :]
        for message in fresh:
            message.token_ids = []
        if fresh:
            fresh[-1].token_ids = list(delta)
        elif delta:
            self.mark_text_only("the server's prompt grew although no message was added")


def _estimate(messages: Sequence[Message]) -> int:
    chars = 0
    for m in messages:
        chars += len(m.text) + sum(len(json.dumps(c.arguments)) + len(c.name) for c in m.tool_calls)
    return chars // CHARS_PER_TOKEN + 4 * len(messages)


def _to_openai(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {
        "role": message.role.value,
        "content": content_to_openai(message.content),
    }
    if message.role is Role.ASSISTANT and message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name or "invalid_tool_call",
                    "arguments": json.dumps(call.arguments, ensure_ascii=False),
                },
            }
            for call in message.tool_calls
        ]
        if not message.content:
            out["content"] = None
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    return out
