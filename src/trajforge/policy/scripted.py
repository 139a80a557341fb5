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
from trajforge.policy.base import Completion, FinishReason, SamplingParams
from trajforge.policy.renderer import ChatRenderer
from trajforge.policy.token_policy import TokenPolicy, TurnRequest
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


def text_completion(renderer: ChatRenderer, reply: str, logprob: float | None) -> Completion:
    """``reply`` as a finished assistant turn: its content as the chat template renders it, then
    the end-of-turn token; each id with ``logprob`` (``None``: no logprobs)."""
    ids = renderer.text_assistant_ids(reply)
    logprobs = None if logprob is None else [logprob] * len(ids)
    return Completion(token_ids=ids, logprobs=logprobs, text=reply, finish_reason=FinishReason.STOP)


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

    def _completion(self, task: Task | None, messages: Sequence[Message]) -> Completion:
        history = list(messages)
        reply = self.reply_fn(task, history)
        if reply is None:
            turn = sum(1 for m in history if m.role is Role.ASSISTANT)
            raise ScriptError(f"policy {self.name!r} has no scripted reply for turn {turn}")
        return text_completion(self.renderer, reply, logprob=0.0)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """The script's reply to no conversation and no task; ``prompt_ids`` are not read (a
        session's turns get theirs from ``complete_whole``)."""
        return self._completion(None, [])

    async def complete_whole(self, turn: TurnRequest) -> Completion:
        return self._completion(turn.session.task, turn.session.messages)
