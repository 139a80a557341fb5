"""Drive an environment with a text reply function (a scripted expert, a test, a debugging user).

No model and no tokens: each reply is parsed with the text tool-call protocol into an assistant
message, with the contract's deterministic call ids ``call_{turn}_{k}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trajforge.envs.base import Env
from trajforge.formats.tool_calls import parse_tool_calls
from trajforge.schema import ExpertFn, Message, Role, Task


@dataclass
class PlayedEpisode:
    """What happened: the whole conversation, the final reward and the last step's info."""

    messages: list[Message]
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)
    state_keys: list[str | None] = field(default_factory=list)


def assistant_message(text: str, turn: int) -> Message:
    """Parse ``text`` into an assistant message whose call ids are ``call_{turn}_{k}``."""
    parsed = parse_tool_calls(text, id_prefix=f"call_{turn}")
    return Message(role=Role.ASSISTANT, content=parsed.content, tool_calls=parsed.tool_calls)


async def play(env: Env, task: Task, reply: ExpertFn, *, max_steps: int = 100) -> PlayedEpisode:
    """Run one episode of ``env`` on ``task``, asking ``reply(task, messages)`` for each turn.

    A ``None`` reply ends the episode undone (reward 0). ``max_steps`` guards against an
    environment that never ends.
    """
    messages = await env.reset(task)
    keys: list[str | None] = []
    for turn in range(max_steps):
        text = reply(task, list(messages))
        if text is None:
            return PlayedEpisode(messages, 0.0, False, {"stopped": "no reply"}, keys)
        action = assistant_message(text, turn)
        result = await env.step(action)
        action.state_key = result.state_key
        action.reward = result.reward
        keys.append(result.state_key)
        messages = [*messages, action, *result.observations]
        if result.done:
            return PlayedEpisode(messages, result.reward, True, result.info, keys)
    return PlayedEpisode(
        messages, 0.0, False, {"stopped": f"not done after {max_steps} steps"}, keys
    )
