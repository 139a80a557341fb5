"""The trajectory contract: one agent episode, OpenAI-chat shaped, carrying what training needs.

Each message records the exact ``token_ids`` it contributed to the model context. Assistant
messages hold the ids the policy sampled (with their ``logprobs``); every other message holds the
ids the chat renderer produced for it, including any generation prompt that follows it. The
concatenation of all ``token_ids`` is therefore the exact context the model saw, and the loss
mask is exactly the assistant messages' ids.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from pydantic import Field, model_validator

from trajforge.schema.content import Strict
from trajforge.schema.messages import Message, Role, ToolSpec, check_conversation
from trajforge.schema.version import SCHEMA_VERSION


class OutcomeStatus(StrEnum):
    OK = "ok"
    TRUNCATED = "truncated"
    ERROR = "error"
    TIMEOUT = "timeout"


class Fault(StrEnum):
    """Whose failure an episode's end is.

    ``policy``: the policy's own (a budget of turns, tokens or time ran out, a broken
    conversation). ``infra``: the infrastructure's (a tool or MCP server crashed or did not
    start, a sandbox did not start, the env or the policy backend raised, an agent program
    crashed or was killed): the episode says nothing about the policy, and RL leaves it out.
    """

    POLICY = "policy"
    INFRA = "infra"


class EvaluatorKind(StrEnum):
    RULE = "rule"
    METRIC = "metric"
    LLM = "llm"
    ENV = "env"
    HUMAN = "human"


def new_id() -> str:
    return uuid.uuid4().hex


class Task(Strict):
    """One problem an environment poses; ``answer`` is the gold answer its verifier uses."""

    id: str = Field(min_length=1)
    prompt: str
    env: str | None = None
    system: str | None = None
    answer: Any = None
    data: dict[str, Any] = Field(default_factory=dict)
    split: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


ExpertFn = Callable[[Task, list[Message]], str | None]
"""A scripted expert: the next assistant reply (text tool protocol) for a task and the
conversation so far, or ``None`` when it has nothing to say."""


class Evaluator(Strict):
    kind: EvaluatorKind
    name: str | None = None
    model: str | None = None
    prompt_version: str | None = None


class Score(Strict):
    """A verdict on a trajectory. A failed scorer records ``error`` and no ``value``."""

    name: str = Field(min_length=1)
    value: float | None = None
    explanation: str = ""
    evaluator: Evaluator
    dimensions: dict[str, float] = Field(default_factory=dict)
    error: str | None = None

    @model_validator(mode="after")
    def _value_or_error(self) -> Score:
        if self.value is None and self.error is None:
            raise ValueError("value: a score needs a value, or an error saying why it has none")
        return self


class Outcome(Strict):
    status: OutcomeStatus = OutcomeStatus.OK
    reward: float | None = None
    error: str | None = None
    reason: str | None = None
    fault: Fault | None = None
    """Whose failure the episode's end is; ``None`` when it ended as it should (or it was
    recorded before schema 1.1, which had no such field). An episode that went on after a tool's
    server crashed under it is ``infra`` whatever its status (``error`` says what failed)."""


class ExactnessKind(StrEnum):
    """How a trajectory's ids relate to what the model saw and sampled.

    ``exact``: every assistant message's ids are the ones sampled, in the context the model
    saw. ``re-rendered``: some were rendered by the chat template from text (turns the client
    sent as text, an import given ids): trainable as text, not as the model's own samples.
    ``split``: the conversation could not continue the trajectory it came from exactly (an
    earlier turn edited, a template that rewrites past turns), so it was started again from
    the re-rendered history, linked to that trajectory by ``split_from``.
    """

    EXACT = "exact"
    RE_RENDERED = "re-rendered"
    SPLIT = "split"


class Exactness(Strict):
    """A trajectory's exactness label; rows recorded before schema 1.2 read as ``exact``."""

    kind: ExactnessKind = ExactnessKind.EXACT
    reason: str | None = None
    """Why it is not exact (required unless it is)."""
    split_from: str | None = None
    """The trajectory a ``split`` one broke off from."""
    rendered_prefix: int | None = Field(default=None, ge=0)
    """How many leading messages had their ids rendered from text rather than sampled (the
    turns after them were sampled in that context); ``None``: not known."""

    @model_validator(mode="after")
    def _reason_unless_exact(self) -> Exactness:
        if self.kind is not ExactnessKind.EXACT and not self.reason:
            raise ValueError(f"exactness: a {self.kind.value} trajectory needs a reason")
        if self.split_from is not None and self.kind is not ExactnessKind.SPLIT:
            raise ValueError("exactness.split_from: only a split trajectory breaks off another")
        return self

    @property
    def is_exact(self) -> bool:
        return self.kind is ExactnessKind.EXACT


class Segment(Strict):
    """Where a trajectory sits in an episode whose context was rewritten (keep-last-K, a
    summary, the agent's own fold, a template that rewrites past turns): each segment holds
    exactly what the model saw and produced between two rewrites."""

    episode_id: str = Field(min_length=1)
    """The episode's own trajectory: its last segment, which carries the sample index."""
    index: int = Field(ge=0)
    """The segment's place in the chain, from 0."""


class Usage(Strict):
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    turns: int = Field(default=0, ge=0)
    tool_calls: int = Field(default=0, ge=0)
    tool_time_s: float = Field(default=0.0, ge=0.0)
    generation_time_s: float = Field(default=0.0, ge=0.0)
    wall_time_s: float = Field(default=0.0, ge=0.0)


LOSS_FROM_MESSAGE = "loss_from_message"
"""``Trajectory.metadata`` key of curated data (repair trajectories): the assistant messages
before this message index are context only, without loss."""


class Trajectory(Strict):
    """One episode. Validation enforces the conversation invariants of the contract."""

    id: str = Field(default_factory=new_id, min_length=1)
    schema_version: str = SCHEMA_VERSION
    task: Task
    env: str | None = None
    group_id: str | None = None
    sample_index: int | None = Field(default=None, ge=0)
    run_id: str | None = None
    model: str | None = None
    tools: list[ToolSpec] = Field(default_factory=list)
    messages: list[Message] = Field(default_factory=list)
    outcome: Outcome = Field(default_factory=Outcome)
    scores: list[Score] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    exactness: Exactness = Field(default_factory=Exactness)
    segment: Segment | None = None
    """Set on every segment of an episode whose context was rewritten; ``None``: one context."""
    created_at: float = Field(default_factory=time.time)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_conversation(self) -> Trajectory:
        check_version(self.schema_version)
        # An earlier segment ends where its context was rewritten: its last calls are answered
        # in the next segment (or folded away), whatever the episode's outcome.
        open_calls = self.outcome.status != OutcomeStatus.OK or self.is_earlier_segment
        check_conversation(self.messages, allow_open_calls=open_calls)
        return self

    @property
    def is_earlier_segment(self) -> bool:
        """Whether this is a segment before the episode's last (the episode is another row)."""
        return self.segment is not None and self.segment.episode_id != self.id

    @property
    def is_tokenized(self) -> bool:
        """True when every message carries its token ids (the trajectory is trainable)."""
        return bool(self.messages) and all(m.token_ids is not None for m in self.messages)

    @property
    def reward(self) -> float | None:
        return self.outcome.reward

    @property
    def num_turns(self) -> int:
        return sum(1 for m in self.messages if m.role is Role.ASSISTANT)

    @property
    def num_tokens(self) -> int:
        return sum(len(m.token_ids or ()) for m in self.messages)

    def score(self, name: str) -> Score | None:
        """The most recent score called ``name``."""
        for s in reversed(self.scores):
            if s.name == name:
                return s
        return None


def is_infra_failure(trajectory: Trajectory) -> bool:
    """Whether the episode was lost to the infrastructure (``Outcome.fault`` is ``infra``): the
    one test RL, statistics, the viewer and the report use."""
    return trajectory.outcome.fault is Fault.INFRA


def check_version(version: str) -> None:
    major = version.split(".", 1)[0]
    if major != SCHEMA_VERSION.split(".", 1)[0]:
        raise ValueError(
            f"schema_version: {version!r} is not readable by schema {SCHEMA_VERSION} "
            "(major versions differ)"
        )
