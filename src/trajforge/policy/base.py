"""The async policy contract.

Token level: ``generate(prompt_ids, sampling) -> Completion``; the policy sees exactly the ids it
is given and returns exactly the ids it sampled. Conversation level: a ``ChatSession`` (made by
``start_session``) keeps the messages and their token ids in step; ``respond`` renders the
prompt, generates, parses the completion into an assistant ``Message`` and appends it. The
rollout engine only uses the conversation level, so token policies and chat-only endpoints are
interchangeable there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from trajforge.schema import Message, Task, ToolSpec


class FinishReason(StrEnum):
    STOP = "stop"
    LENGTH = "length"


@dataclass
class SamplingParams:
    """How a turn samples: ``top_k`` keeps the k most likely tokens only (ties at the k-th
    kept); 0 cuts nothing."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    seed: int | None = None


TokenSink = Callable[[int], None]
"""Receives each id of a completion as it is sampled, on the caller's event loop."""


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[float] | None
    text: str
    finish_reason: FinishReason
    weights_version: int | None = None
    """Which weights sampled it: a local model counts its weight changes (``None``: a script
    or a server)."""


class ChatSession(ABC):
    """A conversation in progress, with the token ids of everything the model has seen."""

    messages: list[Message]
    tools: list[ToolSpec]
    task: Task | None

    @property
    @abstractmethod
    def num_tokens(self) -> int:
        """Tokens in the context so far (what the next prompt will hold)."""

    @abstractmethod
    def add_observations(self, observations: Sequence[Message]) -> list[Message]:
        """Append env messages (tool/user), assigning each the exact token delta it adds."""

    @property
    def sampled_versions(self) -> dict[int, int]:
        """The weights version that sampled each assistant message, by its index in
        ``messages`` (empty where the policy does not count its weights)."""
        return {}


class Policy(ABC):
    """Something that answers a conversation: a local model, a server, or a script."""

    name: str = "policy"
    max_context_tokens: int | None = None
    """Prompt plus completion tokens the policy can hold (``None``: unknown, e.g. a server)."""

    @property
    def precision(self) -> str | None:
        """The numeric precision of the weights that sample (``fp32``, ``bf16``), recorded in
        each trajectory's metadata; ``None`` for a script or a remote server."""
        return None

    @abstractmethod
    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """Sample a continuation of ``prompt_ids``. A policy that acts on the conversation
        rather than on tokens (a script, a model shown the messages' images) reads it in
        ``TokenPolicy.complete_whole``."""

    def end_session(self, session: ChatSession) -> None:
        """``session`` will not continue: what the policy kept for its next turn (a local
        model's cached keys and values) can go. A policy that keeps nothing per conversation (a
        script, a remote server) has nothing to let go."""
        return None

    @abstractmethod
    def start_session(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        task: Task | None = None,
    ) -> ChatSession:
        """Begin a conversation from the env's opening messages. ``task`` is kept on the session
        for policies that need it (a scripted expert knows the gold plan)."""

    @abstractmethod
    async def respond(
        self, session: ChatSession, sampling: SamplingParams, *, turn: int = 0
    ) -> Message:
        """Generate the next assistant message, append it to ``session`` and return it.
        Tool-call ids are derived from ``turn`` so that equal seeds give equal trajectories."""

    async def close(self) -> None:  # noqa: B027 - stateless policies release nothing
        """Release model memory, worker threads or HTTP connections."""
