"""Environments with a simulated user: the agent serves a person through tools, under a policy.

The conversation has three parties. The agent's assistant messages either call tools (the env
answers them, as in a ``ToolEnv``) or speak: a message without tool calls goes to the user,
whose reply comes back as the agent's next user observation. The user is a ``UserResponder``
(the env never imports a policy: the rollout layer wires any trajforge policy in, see
``trajforge.rollout.user``). The user sees the conversation role-swapped, its *view*: the
user simulator's instructions (persona, goal, hidden information) as the system message, the
agent's words as user messages and its own earlier turns as assistant messages.

The user ends the conversation with an explicit signal in its message (``UserSignal``):
``###STOP###`` (the goal is met), ``###TRANSFER###`` (it was handed to a human) or
``###OUT-OF-SCOPE###`` (its instructions do not cover what is asked: it gives up). An agent
tool listed in ``ending_tools`` (a transfer to a human) ends the episode too.

Premature stops (tau2-bench #182, a user stopping right after it confirms, before the agent
acts) are refused: ``###STOP###`` is honoured only once every write the task requires has been
made (``task.data["required_tools"]``: tool names, each needing one successful call; empty or
absent: nothing is required). A refused stop reaches the agent as the user's words without the
signal, so the agent can still act, and is counted in ``state["premature_stops"]``. Giving up
(``###OUT-OF-SCOPE###``, ``###TRANSFER###``) is always honoured.

Limits: ``max_turns`` agent turns (tool calls and speech alike) and ``max_user_turns`` user
replies; either cut ends the episode ``truncated`` with the verifier's verdict.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from enum import StrEnum
from typing import Any

from trajforge.envs.base import StepResult
from trajforge.envs.tool import Tool, ToolContext
from trajforge.envs.tool_env import ERROR_PREFIX, EnvError, ToolEnv
from trajforge.formats import format_tool_call
from trajforge.schema import Message, Role, Task

GREETING = "Hi! How can I help you today?"
"""The agent's opening line as the user sees it (the user speaks first to the agent)."""

USER_SYSTEM_PROMPT = (
    "You are playing a customer talking to a customer-service agent. Follow your instructions; "
    "say only what a customer would say, one short message at a time. Do not reveal "
    "information the agent has not asked for. When your goal is met, reply with ###STOP###. "
    "If the agent transfers you to a human, reply with ###TRANSFER###. If the agent asks for "
    "something your instructions do not cover, reply with ###OUT-OF-SCOPE###.\n\n"
)


class UserSignal(StrEnum):
    """How a simulated user ends the conversation (written anywhere in its message)."""

    STOP = "###STOP###"
    TRANSFER = "###TRANSFER###"
    OUT_OF_SCOPE = "###OUT-OF-SCOPE###"


def find_signal(text: str) -> UserSignal | None:
    """The first end signal in ``text`` (``None``: the user goes on)."""
    found = [(text.find(s.value), s) for s in UserSignal if s.value in text]
    return min(found)[1] if found else None


def strip_signals(text: str) -> str:
    """``text`` without any end signal (what the agent reads of a refused stop)."""
    for signal in UserSignal:
        text = text.replace(signal.value, "")
    return text.strip()


class UserResponder(ABC):
    """The simulated user: the next user message given the user's view of the conversation.

    The view always extends the previous call's view by the message this responder returned
    and the agent's words since, so a responder may keep a session and add only what is new.
    """

    @abstractmethod
    async def respond(self, view: Sequence[Message]) -> Message:
        """The user's next message (an assistant message of the view), its content the text."""


class ScriptedUser(UserResponder):
    """A user from a pure function ``(task, view) -> text`` (tests; no token ids recorded)."""

    def __init__(self, script: Callable[[Task, list[Message]], str | None], task: Task) -> None:
        self.script = script
        self.task = task

    async def respond(self, view: Sequence[Message]) -> Message:
        text = self.script(self.task, list(view))
        if text is None:
            raise EnvError(f"the scripted user has no reply on task {self.task.id!r}")
        return Message(role=Role.ASSISTANT, content=text)


def user_instructions(task: Task) -> str:
    """The user simulator's system message: the shared rules, then the task's scenario
    (``task.data["user"]["instructions"]``: persona, goal and hidden information)."""
    scenario = task.data.get("user", {}).get("instructions")
    if not scenario:
        raise EnvError(f"task {task.id!r}: data.user.instructions is missing (the user's scenario)")
    return USER_SYSTEM_PROMPT + str(scenario)


class UserSimEnv(ToolEnv):
    """A ``ToolEnv`` whose agent talks to a simulated user (see the module docstring).

    Args:
        tools: The agent's tools.
        max_user_turns: User replies before the episode is cut off.
        ending_tools: Tool names whose successful call ends the episode (a transfer).
        user_script: ``(task, view) -> text``, the user used when no responder is bound.
        **options: As ``ToolEnv`` (verifier, max_turns, system_prompt, name, expert, setup...).
    """

    def __init__(
        self,
        tools: Iterable[Tool | Callable[..., Any]],
        *,
        max_user_turns: int = 10,
        ending_tools: Iterable[str] = (),
        user_script: Callable[[Task, list[Message]], str | None] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(tools, **options)
        if max_user_turns < 1:
            raise EnvError(f"max_user_turns: must be at least 1, got {max_user_turns}")
        self.max_user_turns = max_user_turns
        self.ending_tools = frozenset(ending_tools)
        unknown = self.ending_tools - set(self.tool_map)
        if unknown:
            raise EnvError(f"env {self.name!r}: ending_tools names no tool: {sorted(unknown)}")
        self.user_script = user_script
        self.user: UserResponder | None = None
        self.view: list[Message] = []
        self.user_turns = 0

    def bind_user(self, responder: UserResponder) -> None:
        """Make ``responder`` the user of the next episodes (before ``reset``)."""
        self.user = responder

    def _responder(self, task: Task) -> UserResponder:
        if self.user is not None:
            return self.user
        if self.user_script is None:
            raise EnvError(f"env {self.name!r}: no simulated user is bound (bind_user)")
        self.user = ScriptedUser(self.user_script, task)
        return self.user

    async def reset(self, task: Task) -> list[Message]:
        opening = await super().reset(task)
        assert self.context is not None
        self.context.state.update(premature_stops=0, signal=None, user_turns=0)
        self.view = [
            Message(role=Role.SYSTEM, content=user_instructions(task)),
            Message(role=Role.USER, content=GREETING),
        ]
        self.user_turns = 0
        first = await self._user_turn()
        if find_signal(first) is not None:
            raise EnvError(f"task {task.id!r}: the simulated user ended before saying anything")
        opening[-1] = Message(role=Role.USER, content=first)
        self.messages = list(opening)
        return opening

    async def _user_turn(self) -> str:
        reply = await self._responder(self.task).respond(self.view)
        self.view.append(reply)
        self.user_turns += 1
        assert self.context is not None
        self.context.state["user_turns"] = self.user_turns
        return reply.text

    def state_key(self) -> str:
        """The tool history's key plus everything the user has said (the state the agent
        acts from includes the user's words)."""
        said = [m.text for m in self.view if m.role is Role.ASSISTANT]
        digest = hashlib.sha256(json.dumps([super().state_key(), said]).encode()).hexdigest()
        return digest[:16]

    def required_done(self) -> bool:
        """Whether every write the task requires has had a successful call."""
        required = Counter(self.task.data.get("required_tools", []))
        made = Counter(name for name, _, result in self._history if _succeeded(result))
        return all(made[name] >= count for name, count in required.items())

    async def step(self, action: Message) -> StepResult:
        if action.tool_calls or self.context is None or self.done:
            result = await super().step(action)
            return await self._maybe_end_by_tool(action, result)
        key = self.state_key()
        self.turn += 1
        self.messages.append(action)
        self.view.append(Message(role=Role.USER, content=action.content))
        text = await self._user_turn()
        signal = find_signal(text)
        state = self.context.state
        if signal is UserSignal.STOP and not self.required_done():
            state["premature_stops"] += 1
            signal = None
            text = strip_signals(text)
        if signal is not None:
            state["signal"] = signal.value
            return await self._finish(key, [], truncated=False, info={"signal": signal.value})
        observation = Message(role=Role.USER, content=text)
        self.messages.append(observation)
        cut = self.user_turns >= self.max_user_turns or self.turn >= self.max_turns
        if cut:
            return await self._finish(key, [observation], truncated=True, info={})
        return StepResult(observations=[observation], state_key=key)

    async def _maybe_end_by_tool(self, action: Message, result: StepResult) -> StepResult:
        if result.done or not self.ending_tools:
            return result
        ended = [
            call.name
            for call, obs in zip(action.tool_calls, result.observations, strict=True)
            if call.name in self.ending_tools and _succeeded(obs.text)
        ]
        if not ended:
            return result
        assert self.context is not None
        self.context.state["signal"] = f"tool:{ended[0]}"
        final = await self._finish(
            result.state_key or "", result.observations, truncated=False, info=result.info
        )
        final.info["signal"] = f"tool:{ended[0]}"
        return final


def plan_reply(plan: Sequence[Sequence[Any]], messages: Sequence[Message]) -> str:
    """A scripted expert's reply: step k of ``plan`` (k = assistant turns so far), a step being
    ``["say", text]`` or ``["call", tool, arguments]`` (text protocol); after the plan, a
    closing question."""
    step = sum(1 for m in messages if m.role is Role.ASSISTANT)
    if step >= len(plan):
        return "Is there anything else I can help with?"
    kind, *rest = plan[step]
    return format_tool_call(rest[0], rest[1]) if kind == "call" else str(rest[0])


def _succeeded(result: str) -> bool:
    return not result.startswith(ERROR_PREFIX)


def db_of(context: ToolContext) -> dict[str, Any]:
    """The episode's database (``state["db"]``), as a domain's tools keep it."""
    db = context.state.get("db")
    if not isinstance(db, dict):
        raise EnvError("the episode has no database (state['db']); was setup run?")
    return db
