"""A policy that replays an earlier episode's first turns, token for token, then samples: the
start of a tree-structured rollout's branch.

Each branched task's first ``k`` assistant turns are the parent episode's own sampled ids and
logprobs, returned as completions without running the model; with a deterministic environment
the observations between them render to the parent's ids too, so the branch's context up to its
first sampled turn is the parent's prefix exactly, and the decode engine's prefix cache serves
that prefill from the parent's (``policy/engine``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trajforge.policy.base import ChatSession, Completion, FinishReason, SamplingParams, TokenSink
from trajforge.policy.session import RenderedSession
from trajforge.policy.token_policy import TokenPolicy, stream_whole
from trajforge.schema import Message, Role


def replayed_turns(messages: Sequence[Message], turns: int) -> list[Completion]:
    """The first ``turns`` assistant messages of an episode as completions, ids and logprobs
    as sampled."""
    out: list[Completion] = []
    for m in messages:
        if m.role is not Role.ASSISTANT or len(out) == turns:
            continue
        out.append(
            Completion(
                token_ids=list(m.token_ids or ()),
                logprobs=None if m.logprobs is None else list(m.logprobs),
                text=m.content if isinstance(m.content, str) else "",
                finish_reason=FinishReason.STOP,
            )
        )
    return out


class ReplayedPrefix(TokenPolicy):
    """``policy``, except that a task in ``prefixes`` plays its first turns as given.

    Args:
        policy: the policy that samples every other turn; it renders prompts from token ids, so
            the replayed turns join its conversation exactly.
        prefixes: task id -> the completions of its first turns, in order (``replayed_turns``).
    """

    def __init__(self, policy: TokenPolicy, prefixes: Mapping[str, list[Completion]]) -> None:
        super().__init__(policy.tokenizer, name=policy.name)
        # The sessions must be the policy's own: its renderer, and with it its cache keys.
        self.renderer = policy.renderer
        self.policy = policy
        self.prefixes = dict(prefixes)
        self.max_context_tokens = policy.max_context_tokens

    @property
    def precision(self) -> str | None:
        return self.policy.precision

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        *,
        messages: Sequence[Message] | None = None,
    ) -> Completion:
        return await self.policy.generate(prompt_ids, sampling, messages=messages)

    async def complete(
        self,
        session: RenderedSession,
        prompt_ids: list[int],
        sampling: SamplingParams,
        *,
        on_token: TokenSink | None = None,
    ) -> Completion:
        prefix = self.prefixes.get(session.task.id, []) if session.task is not None else []
        turn = sum(m.role is Role.ASSISTANT for m in session.messages)
        if turn >= len(prefix):
            return await self.policy.complete(session, prompt_ids, sampling, on_token=on_token)
        given = prefix[turn]
        completion = Completion(
            token_ids=list(given.token_ids),
            logprobs=None if given.logprobs is None else list(given.logprobs),
            text=given.text,
            finish_reason=given.finish_reason,
        )
        stream_whole(completion, on_token)
        return completion

    def end_session(self, session: ChatSession) -> None:
        self.policy.end_session(session)

    async def close(self) -> None:
        await self.policy.close()
