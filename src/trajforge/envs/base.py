"""The async environment contract.

An episode is ``reset(task)`` once, then ``step(assistant_message)`` until ``done``, then
``close()``. ``StepResult.reward`` is the turn's reward; on the final step (``done=True``) it is
the episode's outcome reward (the verifier's verdict). ``StepResult.state_key`` identifies the
environment state *before* the action, so steps that act from the same state can be grouped
across the trajectories of one group (GiGPO's anchor states).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from trajforge.schema import Message, Task, ToolSpec


@dataclass
class StepResult:
    observations: list[Message]
    reward: float = 0.0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    state_key: str | None = None
    infra_fault: str | None = None
    """What of the infrastructure has failed in the episode so far (a tool's server crashed),
    when something has: the episode goes on, and is recorded as lost to the infrastructure."""


class Env(ABC):
    """An environment the agent acts in. Subclasses set ``name`` and ``tools``.

    ``times_out_tools`` says that the env bounds its own tool calls (a slow tool becomes a
    message the model reads); the rollout engine's per-step timeout is then only a backstop.
    """

    name: str = "env"
    tools: list[ToolSpec]
    times_out_tools: bool = False

    def __init__(self) -> None:
        self.tools = []

    @abstractmethod
    async def reset(self, task: Task) -> list[Message]:
        """Start an episode on ``task``; return the opening messages (system and/or user)."""

    @abstractmethod
    async def step(self, action: Message) -> StepResult:
        """Apply the assistant's message; answer every tool call it makes exactly once."""

    async def list_tools(self) -> list[ToolSpec]:
        """The tools an episode offers, known without running one (an env whose tools come
        from servers asks them here)."""
        return list(self.tools)

    def adopt_limits(  # noqa: B027 - an env without turn or tool limits of its own takes none
        self, *, max_turns: int | None, tool_timeout_s: float | None
    ) -> None:
        """Take a run's limits as the env's own where it enforces them itself (``None``: keep
        the env's). Called once per episode, before ``reset``."""

    async def close(self) -> None:  # noqa: B027 - most envs hold nothing to release
        """Release whatever the episode holds (processes, connections, temp dirs)."""

    def expert(self, task: Task, messages: list[Message]) -> str | None:
        """The scripted expert's next assistant reply (text protocol), or None if there is none."""
        return None

    def episode_metadata(self) -> dict[str, Any]:
        """What the episode's trajectory records in its metadata on the env's behalf (what a
        memory retrieved for it); read once, when the episode ends."""
        return {}
