"""Harbor's Agent Trajectory Interchange Format (ATIF) as pydantic models, v1.0 to v1.8.

Written from the spec, not imported: the ``harbor`` package needs Python >= 3.12 (the tests
check files both ways against ``harbor`` 0.26.0's own models in a side environment). Sources: the
ATIF RFC, ``docs/rfcs/0001-trajectory-format.md`` of laude-institute/harbor (now
harbor-framework/harbor, ``rfcs/0001-trajectory-format.md``), v1.4 as mirrored in
OpenAgentsInc/openagents ``docs/atif/0001-trajectory-format.md`` at commit
d39efb6f16b8c5efc3ffa84578400f948f9800a1 and its v1.7 text (April 2026); and the checks of
harbor's own models (``src/harbor/models/trajectories/``: ``step.py``, ``trajectory.py``, and
v1.8's audio parts in ``content.py``, harbor 0.26.0).
Every object forbids unknown fields, as harbor's models do; later versions only add optional
fields, so one model reads every version.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ATIF_VERSIONS = tuple(f"ATIF-v1.{minor}" for minor in range(9))
"""Every ATIF version, oldest first; the last is the one written."""
AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


class AtifModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StepSource(StrEnum):
    SYSTEM = "system"
    USER = "user"
    AGENT = "agent"


class ImageSource(AtifModel):
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    path: str


AUDIO_ALIASES = {
    "audio/mp3": "audio/mpeg",
    "audio/mpga": "audio/mpeg",
    "audio/x-mpeg": "audio/mpeg",
    "audio/x-wav": "audio/wav",
    "audio/wave": "audio/wav",
    "audio/vnd.wave": "audio/wav",
    "audio/x-m4a": "audio/mp4",
    "audio/m4a": "audio/mp4",
    "audio/x-aac": "audio/aac",
    "audio/x-flac": "audio/flac",
    "audio/x-aiff": "audio/aiff",
}
"""Spellings producers write for a registered audio type (Gemini's ``audio/mp3``), read as it."""


class AudioSource(AtifModel):
    """An audio file or URL (v1.8), with its length where known."""

    media_type: Literal[
        "audio/wav", "audio/mpeg", "audio/mp4", "audio/aac", "audio/ogg", "audio/flac",
        "audio/webm", "audio/aiff",
    ]  # fmt: skip
    path: str
    duration_sec: float | None = Field(default=None, ge=0)

    @field_validator("media_type", mode="before")
    @classmethod
    def _registered(cls, value: Any) -> Any:
        if isinstance(value, str):
            spelled = value.strip().lower()
            return AUDIO_ALIASES.get(spelled, spelled)
        return value


class ContentPart(AtifModel):
    """Text, an image (v1.6) or audio (v1.8): ``text`` with ``type: text``, a ``source`` of
    the part's own kind with ``type: image`` or ``audio``."""

    type: Literal["text", "image", "audio"]
    text: str | None = None
    source: ImageSource | AudioSource | None = None

    @model_validator(mode="after")
    def _one_payload(self) -> ContentPart:
        if (self.type == "text") != (self.text is not None):
            raise ValueError("text: required for a text part and only there")
        if (self.type != "text") != (self.source is not None):
            raise ValueError(f"source: required for an {self.type} part and only there")
        kind = ImageSource if self.type == "image" else AudioSource
        if self.source is not None and not isinstance(self.source, kind):
            raise ValueError(f"source: a {self.type} part needs an {kind.__name__}")
        return self


class AtifToolCall(AtifModel):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]
    extra: dict[str, Any] | None = None


class SubagentTrajectoryRef(AtifModel):
    session_id: str | None = None
    trajectory_id: str | None = None
    trajectory_path: str | None = None
    extra: dict[str, Any] | None = None


class ObservationResult(AtifModel):
    source_call_id: str | None = None
    content: str | list[ContentPart] | None = None
    subagent_trajectory_ref: list[SubagentTrajectoryRef] | None = None
    extra: dict[str, Any] | None = None


class Observation(AtifModel):
    results: list[ObservationResult]


class Metrics(AtifModel):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None


class Step(AtifModel):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: StepSource
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: str | list[ContentPart]
    reasoning_content: str | None = None
    tool_calls: list[AtifToolCall] | None = None
    observation: Observation | None = None
    metrics: Metrics | None = None
    is_copied_context: bool | None = None
    llm_call_count: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None

    @field_validator("timestamp")
    @classmethod
    def _iso_8601(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"not an ISO 8601 timestamp: {value!r}") from None
        return value

    @model_validator(mode="after")
    def _agent_only(self) -> Step:
        if self.source is not StepSource.AGENT:
            for name in AGENT_ONLY:
                if getattr(self, name) is not None:
                    raise ValueError(f"{name}: only agent steps have one, not {self.source} steps")
        elif self.llm_call_count == 0 and (self.metrics or self.reasoning_content is not None):
            raise ValueError("llm_call_count: 0 (no LLM call) with metrics or reasoning_content")
        return self


class Agent(AtifModel):
    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class FinalMetrics(AtifModel):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = None
    extra: dict[str, Any] | None = None


class AtifTrajectory(AtifModel):
    schema_version: str
    session_id: str | None = None
    trajectory_id: str | None = None
    agent: Agent
    steps: list[Step] = Field(min_length=1)
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: dict[str, Any] | None = None
    subagent_trajectories: list[AtifTrajectory] | None = None

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: str) -> str:
        if value not in ATIF_VERSIONS:
            raise ValueError(
                f"{value!r} is not an ATIF version this trajforge reads "
                f"({ATIF_VERSIONS[0]} to {ATIF_VERSIONS[-1]})"
            )
        return value

    @model_validator(mode="after")
    def _check_steps(self) -> AtifTrajectory:
        for i, step in enumerate(self.steps):
            if step.step_id != i + 1:
                raise ValueError(f"steps[{i}].step_id: expected {i + 1}, got {step.step_id}")
            calls = [call.tool_call_id for call in step.tool_calls or []]
            if len(set(calls)) != len(calls):
                raise ValueError(f"steps[{i}].tool_calls: a tool_call_id appears twice")
            for j, result in enumerate(step.observation.results if step.observation else []):
                if result.source_call_id is not None and result.source_call_id not in calls:
                    raise ValueError(
                        f"steps[{i}].observation.results[{j}].source_call_id: "
                        f"{result.source_call_id!r} is no tool call of this step"
                    )
        return self
