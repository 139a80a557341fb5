"""Deterministic scripted replies as token-exact assistant turns (tests and env experts).

A reply is tokenized the way the chat template renders an assistant turn's content, followed by
the end-of-turn token a model would sample to stop. Its logprobs are all 0.0: the script puts
probability 1 on each of its tokens, so the values are exact for the policy that produced them
(and RL importance ratios against a scripted behaviour policy are well defined). The
trajectories are token-exact and can be used for SFT as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from trajforge.errors import TrajforgeError
from trajforge.policy.base import Completion, FinishReason, SamplingParams, TokenSink
from trajforge.policy.session import RenderedSession
from trajforge.policy.token_policy import TokenPolicy, stream_whole
from trajforge.schema import Message, Role, Task

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

ReplyFn = Callable[[Task | None, list[Message]], str | None]


class ScriptError(TrajforgeError):
    """The script has no reply for the conversation it was asked to continue."""


def _fixed_replies(replies: Sequence[str]) -> ReplyFn:
    fixed = list(replies)

    def reply(task: Task | None, messages: list[Message]) -> str | None:
        turn = sum(1 for m in messages if m.role is Role.ASSISTANT)
        return fixed[turn] if turn < len(fixed) else None

    return reply


class ScriptedPolicy(TokenPolicy):
    """Replies from ``reply_fn(task, messages) -> str`` (or one fixed reply per turn, in order).

    Args:
        reply_fn: a function of the task (``None`` outside a session) and the conversation so
            far, returning the next assistant reply in the text protocol; or a list of replies.
        tokenizer: the tokenizer whose chat template the replies are rendered with.
        name: the policy's name.
    """

    def __init__(
        self,
        reply_fn: ReplyFn | Sequence[str],
        tokenizer: PreTrainedTokenizerBase,
        *,
        name: str = "scripted",
        tool_protocol: str = "auto",
        parser: str = "text",
    ) -> None:
        super().__init__(tokenizer, tool_protocol=tool_protocol, parser=parser, name=name)
        self.reply_fn: ReplyFn = reply_fn if callable(reply_fn) else _fixed_replies(reply_fn)

    def _completion(self, reply: str | None, messages: Sequence[Message]) -> Completion:
        if reply is None:
            turn = sum(1 for m in messages if m.role is Role.ASSISTANT)
            raise ScriptError(f"policy {self.name!r} has no scripted reply for turn {turn}")
        ids = self.renderer.text_assistant_ids(reply)
        return Completion(
            token_ids=ids, logprobs=[0.0] * len(ids), text=reply, finish_reason=FinishReason.STOP
        )

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        *,
        messages: Sequence[Message] | None = None,
    ) -> Completion:
        """The script's reply to ``messages`` (with no task); ``prompt_ids`` are not read."""
        history = list(messages or [])
        return self._completion(self.reply_fn(None, history), history)

    async def complete(
        self,
        session: RenderedSession,
        prompt_ids: list[int],
        sampling: SamplingParams,
        *,
        on_token: TokenSink | None = None,
    ) -> Completion:
        history = list(session.messages)
        completion = self._completion(self.reply_fn(session.task, history), history)
        stream_whole(completion, on_token)
        return completion
