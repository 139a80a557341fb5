"""A policy with some of its turns forced: a script answers where it has a reply, the policy
everywhere else.

What a recovery evaluation needs: a mistake the model did not make (a malformed first call, a
call that errors), put into its own episode, and what the model does next. The forced turns are
token-exact like a scripted teacher's (the reply as the chat template renders it, then the
end-of-turn token) and carry no logprobs, since the model did not sample them.
"""

from __future__ import annotations

from trajforge.errors import ConfigError
from trajforge.policy.base import ChatSession, Completion, SamplingParams
from trajforge.policy.scripted import text_completion
from trajforge.policy.session import RenderedSession
from trajforge.policy.token_policy import TokenPolicy, TurnRequest, stream_whole
from trajforge.schema import ExpertFn


class ForcedTurns(TokenPolicy):
    """``policy``, except at the turns where ``force(task, messages)`` returns a reply.

    Args:
        policy: the policy that answers the other turns; it renders prompts from token ids
            (a local model or a script), so the forced turns join its conversation exactly.
        force: a function of the task and the conversation so far, like an environment's
            expert, returning the reply to force or ``None`` to let the policy answer.
    """

    def __init__(self, policy: TokenPolicy, force: ExpertFn) -> None:
        super().__init__(policy.tokenizer, name=policy.name)
        # The sessions must be the policy's own: its renderer, and with it its cache keys.
        self.renderer = policy.renderer
        self.policy = policy
        self.force = force
        self.max_context_tokens = policy.max_context_tokens

    @classmethod
    def wrapping(cls, policy: object, force: ExpertFn, what: str) -> ForcedTurns:
        """``ForcedTurns(policy, force)``, or a ``ConfigError`` naming ``what`` when the policy
        answers from messages rather than tokens (an endpoint)."""
        if not isinstance(policy, TokenPolicy):
            raise ConfigError(
                f"{what}: forced turns need a policy that samples token ids (a local model or "
                f"a script), not {type(policy).__name__}"
            )
        return cls(policy, force)

    @property
    def precision(self) -> str | None:
        return self.policy.precision

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        return await self.policy.generate(prompt_ids, sampling)

    async def complete(self, turn: TurnRequest) -> Completion:
        completion = self.forced(turn.session)
        if completion is None:
            return await self.policy.complete(turn)
        stream_whole(completion, turn.on_token)
        return completion

    def forced(self, session: RenderedSession) -> Completion | None:
        """The completion forced at ``session``'s next turn (``None``: the policy samples)."""
        reply = None if session.task is None else self.force(session.task, session.messages)
        return None if reply is None else text_completion(self.renderer, reply, logprob=None)

    def end_session(self, session: ChatSession) -> None:
        self.policy.end_session(session)

    async def close(self) -> None:
        await self.policy.close()
