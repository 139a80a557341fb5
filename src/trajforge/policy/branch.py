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

from trajforge.policy.base import Completion, FinishReason
from trajforge.policy.forced import ForcedTurns
from trajforge.policy.session import RenderedSession
from trajforge.policy.token_policy import TokenPolicy
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


class ReplayedPrefix(ForcedTurns):
    """``policy``, except that a task in ``prefixes`` plays its first turns as given.

    Args:
        policy: the policy that samples every other turn; it renders prompts from token ids, so
            the replayed turns join its conversation exactly.
        prefixes: task id -> the completions of its first turns, in order (``replayed_turns``).
    """

    def __init__(self, policy: TokenPolicy, prefixes: Mapping[str, list[Completion]]) -> None:
        super().__init__(policy, lambda task, messages: None)
        self.prefixes = dict(prefixes)

    def forced(self, session: RenderedSession) -> Completion | None:
        prefix = self.prefixes.get(session.task.id, []) if session.task is not None else []
        turn = sum(m.role is Role.ASSISTANT for m in session.messages)
        if turn >= len(prefix):
            return None
        given = prefix[turn]
        return Completion(
            token_ids=list(given.token_ids),
            logprobs=None if given.logprobs is None else list(given.logprobs),
            text=given.text,
            finish_reason=given.finish_reason,
        )
