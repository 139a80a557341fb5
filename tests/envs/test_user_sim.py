"""The simulated-user env kind: signals, the premature-stop guard, limits, ending tools."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from episodes import assistant_message
from trajforge.envs.tool import ToolContext, tool
from trajforge.envs.tool_env import EnvError
from trajforge.envs.user_sim import (
    GREETING,
    UserResponder,
    UserSignal,
    UserSimEnv,
    find_signal,
    strip_signals,
)
from trajforge.formats.tool_calls import format_tool_call
from trajforge.schema import Message, Role, Task


@tool
def book(context: ToolContext) -> str:
    """Book the thing."""
    context.state["booked"] = True
    return "booked"


@tool
def handoff(context: ToolContext) -> str:
    """Hand the user to a human."""
    return "handed off"


class Replies(UserResponder):
    """Says its lines in order and records every view it was shown."""

    def __init__(self, *lines: str) -> None:
        self.lines = list(lines)
        self.views: list[list[Message]] = []

    async def respond(self, view: Sequence[Message]) -> Message:
        self.views.append(list(view))
        return Message(role=Role.ASSISTANT, content=self.lines.pop(0))


TASK = Task(
    id="t",
    prompt="book it",
    data={"user": {"instructions": "You want it booked."}, "required_tools": ["book"]},
)


def _env(user: Replies, **kwargs: object) -> UserSimEnv:
    env = UserSimEnv(
        [book, handoff],
        verifier=lambda evidence: float(evidence.state.get("booked", False)),
        ending_tools=("handoff",),
        **kwargs,  # type: ignore[arg-type]
    )
    env.bind_user(user)
    return env


def test_signals_are_found_and_stripped() -> None:
    assert find_signal("ok ###TRANSFER### then ###STOP###") is UserSignal.TRANSFER
    assert find_signal("fine") is None
    assert strip_signals("Yes, go ahead. ###STOP###") == "Yes, go ahead."


def test_the_user_opens_and_sees_the_agent_words_role_swapped() -> None:
    user = Replies("Please book it.", "Thanks! ###STOP###")
    env = _env(user)

    async def run() -> tuple[list[Message], float]:
        opening = await env.reset(TASK)
        await env.step(assistant_message(format_tool_call("book", {}), 0))
        result = await env.step(assistant_message("It is booked.", 1))
        assert result.done and result.info["signal"] == "###STOP###"
        return opening, result.reward

    opening, reward = asyncio.run(run())
    assert [m.role for m in opening] == [Role.SYSTEM, Role.USER]
    assert opening[1].content == "Please book it." and reward == 1.0
    first, second = user.views
    assert first[0].role is Role.SYSTEM and "You want it booked." in first[0].content
    assert [(m.role, m.content) for m in first[1:]] == [(Role.USER, GREETING)]
    assert second[:3] == [*first, Message(role=Role.ASSISTANT, content="Please book it.")]
    assert (second[3].role, second[3].content) == (Role.USER, "It is booked.")


def test_a_stop_before_the_required_write_is_refused_and_the_agent_can_still_act() -> None:
    """tau2-bench #182: the user confirms and stops before the agent has acted."""
    user = Replies("Please book it.", "Yes, go ahead. ###STOP###", "Thanks. ###STOP###")
    env = _env(user)

    async def run() -> float:
        await env.reset(TASK)
        refused = await env.step(assistant_message("Shall I book it?", 0))
        assert not refused.done
        assert [m.content for m in refused.observations] == ["Yes, go ahead."]
        await env.step(assistant_message(format_tool_call("book", {}), 1))
        done = await env.step(assistant_message("Booked.", 2))
        assert done.done
        return done.reward

    assert asyncio.run(run()) == 1.0
    assert env.context is not None and env.context.state["premature_stops"] == 1


def test_giving_up_is_always_honoured_and_limits_cut_both_sides() -> None:
    env = _env(Replies("Book it.", "I cannot say. ###OUT-OF-SCOPE###"))

    async def gives_up() -> tuple[bool, float, object]:
        await env.reset(TASK)
        result = await env.step(assistant_message("What is your blood type?", 0))
        return result.done, result.reward, result.info.get("signal")

    assert asyncio.run(gives_up()) == (True, 0.0, "###OUT-OF-SCOPE###")
    chatty = _env(Replies("Book it.", "Hm.", "Hm?"), max_user_turns=3)

    async def cut() -> tuple[bool, bool]:
        await chatty.reset(TASK)
        first = await chatty.step(assistant_message("Hello?", 0))
        second = await chatty.step(assistant_message("Hello??", 1))
        return first.done, second.done and second.info["truncated"]

    assert asyncio.run(cut()) == (False, True)


def test_an_ending_tool_ends_the_episode_and_bad_setups_are_refused() -> None:
    env = _env(Replies("Get me a human."))

    async def run() -> tuple[bool, object]:
        await env.reset(TASK)
        result = await env.step(assistant_message(format_tool_call("handoff", {}), 0))
        return result.done, result.info["signal"]

    assert asyncio.run(run()) == (True, "tool:handoff")
    with pytest.raises(EnvError, match="ending_tools names no tool"):
        UserSimEnv([book], ending_tools=("nope",))
    with pytest.raises(EnvError, match="no simulated user is bound"):
        asyncio.run(UserSimEnv([book]).reset(TASK))
    with pytest.raises(EnvError, match=r"data\.user\.instructions is missing"):
        unbound = UserSimEnv([book])
        unbound.bind_user(Replies("hi"))
        asyncio.run(unbound.reset(Task(id="x", prompt="p")))
