"""Policies that act on token ids: the conversation level is done here, once, for all of them.

A ``TokenPolicy`` renders the session's context with a ``ChatRenderer``, asks ``generate`` for a
continuation of exactly those ids, and parses the sampled ids into an assistant message that
keeps them (and their logprobs) as they are. Backends implement only ``generate``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trajforge.errors import TrajforgeError
from trajforge.policy.base import ChatSession, Completion, Policy, SamplingParams, TokenSink
from trajforge.policy.renderer import ChatRenderer, RenderError, ToolProtocol
from trajforge.policy.session import RenderedSession
from trajforge.schema import Message, Task, Timing, ToolSpec

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["RenderError", "RenderedSession", "TokenPolicy", "TurnRequest", "stream_whole"]


@dataclass(frozen=True)
class TurnRequest:
    """What a token policy is asked for a session's next turn (``TokenPolicy.complete``): the
    session, the prompt ids rendered from it, how to sample, and who gets each sampled id as it
    is sampled (``None``: nobody)."""

    session: RenderedSession
    prompt_ids: list[int]
    sampling: SamplingParams
    on_token: TokenSink | None = None


def stream_whole(completion: Completion, on_token: TokenSink | None) -> None:
    """Hand a completion got whole to ``on_token``, id by id."""
    if on_token is not None:
        for token in completion.token_ids:
            on_token(token)


class TokenPolicy(Policy):
    """Base of every policy that generates token ids from token ids.

    Args:
        tokenizer: the model's Hugging Face tokenizer (with a chat template).
        tool_protocol: see ``ChatRenderer``; ``auto`` uses the template's native tool support
            when it has one and the ``<tool_call>`` text protocol otherwise.
        parser: the tool-call parser that reads completions.
        name: the policy's name (recorded as the trajectory's model).
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        *,
        tool_protocol: ToolProtocol | str = ToolProtocol.AUTO,
        parser: str = "text",
        name: str | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.renderer = ChatRenderer(tokenizer, tool_protocol=tool_protocol, parser=parser)
        if name is not None:
            self.name = name

    def start_session(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        task: Task | None = None,
    ) -> RenderedSession:
        return RenderedSession.opened(self.renderer, messages, tools, task=task)

    async def complete(self, turn: TurnRequest) -> Completion:
        """The completion for the session's next turn. ``turn.on_token`` gets each sampled id:
        as it is sampled by a policy that decodes step by step (``HFPolicy``, which overrides
        this), all at the end by one that gets its reply whole (``complete_whole``)."""
        completion = await self.complete_whole(turn)
        stream_whole(completion, turn.on_token)
        return completion

    async def complete_whole(self, turn: TurnRequest) -> Completion:
        """The session's next completion, got whole: by default ``generate`` on the prompt ids.
        Policies that act on the conversation (a script) override this."""
        return await self.generate(turn.prompt_ids, turn.sampling)

    async def respond(
        self, session: ChatSession, sampling: SamplingParams, *, turn: int = 0
    ) -> Message:
        if not isinstance(session, RenderedSession) or session.renderer is not self.renderer:
            raise TrajforgeError(
                f"policy {self.name!r} can only continue sessions it started with start_session"
            )
        prompt_ids = session.prompt_ids()
        started = time.time()
        clock = time.perf_counter()
        completion = await self.complete(TurnRequest(session, prompt_ids, sampling))
        timing = Timing(started_at=started, duration_s=time.perf_counter() - clock)
        return session.add_completion(completion, turn=turn, timing=timing)
