"""OpenEnv's typed models for a trajforge environment, and OpenEnv's client typed with them.

A trajforge episode is a conversation, so its OpenEnv action is the assistant's turn (text and
tool calls), its observation the messages the environment answers with (the opening system
and user messages after a reset, tool or user messages after a step) with the tools offered,
and its state the task and how far the episode has gone. ``TrajforgeEnvClient`` is OpenEnv's
own ``EnvClient`` (one WebSocket session, one environment instance on the server) speaking
these models, for a program that drives ``trajforge openenv serve``.
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import Action, Observation, State
from pydantic import BaseModel, ConfigDict, Field


class ToolCallAction(BaseModel):
    """One tool call of the assistant's turn."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, description="The call's id; its result carries it back")
    name: str = Field(min_length=1, description="The tool's name")
    arguments: dict[str, Any] = Field(default_factory=dict, description="The tool's arguments")


class AssistantAction(Action):
    """The assistant's turn: its text and its tool calls (none: its final answer)."""

    content: str = Field(default="", description="The assistant's text")
    tool_calls: list[ToolCallAction] = Field(default_factory=list, description="Tool calls")


class ChatMessage(BaseModel):
    """A message the environment sends (OpenAI chat shaped)."""

    model_config = ConfigDict(extra="forbid")

    role: str = Field(description="system, user or tool")
    content: str
    tool_call_id: str | None = Field(default=None, description="The call a tool result answers")
    name: str | None = Field(default=None, description="The tool that answered")


class ChatObservation(Observation):
    """The environment's messages; after a reset also its tools and task."""

    messages: list[ChatMessage] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(
        default_factory=list, description="The tools offered, as OpenAI function tools"
    )
    task_id: str = Field(default="", description="The task of the episode")
    info: dict[str, Any] = Field(default_factory=dict, description="The step's counters")


class EpisodeState(State):
    """Where the episode stands."""

    task_id: str | None = Field(default=None, description="The task of the episode")
    done: bool = Field(default=False, description="Whether the episode has ended")
    reward: float | None = Field(default=None, description="The last step's reward")


class TrajforgeEnvClient(EnvClient[AssistantAction, ChatObservation, EpisodeState]):
    """OpenEnv's client for a trajforge environment served by ``trajforge openenv serve``."""

    def _step_payload(self, action: AssistantAction) -> dict[str, Any]:
        return action.model_dump(mode="json")

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[ChatObservation]:
        reward, done = payload.get("reward"), bool(payload.get("done", False))
        observation = ChatObservation.model_validate(
            {**payload.get("observation", {}), "reward": reward, "done": done}
        )
        return StepResult(observation=observation, reward=reward, done=done)

    def _parse_state(self, payload: dict[str, Any]) -> EpisodeState:
        return EpisodeState.model_validate(payload)
