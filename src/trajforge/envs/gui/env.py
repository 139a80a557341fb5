"""``ScreenEnv``: any ``Screen`` as an environment for pixel agents.

The opening user message holds the instruction and the first screenshot (an image part); each
step answers every tool call with one tool message (what was done, or ``Error: ...`` for a call
that is malformed, unknown, mistyped or refused by the screen, and the episode goes on), then a
user message with the screenshot after the actions. The episode ends when the agent calls
``done`` (or replies without a tool call: its text is the answer), when the screen says the
task has ended, or after ``max_turns`` (``info["truncated"]``); its reward is the screen's
``reward(answer)`` then. ``state_key`` is the screen's (what it shows).

Screen calls run in a worker thread: a screen backed by a virtual machine or an emulator may
block, and must not stall the other episodes of a rollout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from trajforge.envs.base import Env, StepResult
from trajforge.envs.gui.actions import PIXEL_ACTIONS, ActionError, Done, action_specs, parse_action
from trajforge.envs.gui.screen import Screen
from trajforge.envs.tool_env import ERROR_PREFIX, EnvError
from trajforge.schema import ExpertFn, ImagePart, Message, Role, Task, TextPart, ToolCall

SYSTEM_PROMPT = (
    "You operate a graphical screen that you see as screenshots; (0, 0) is its top-left "
    "pixel. Act with the tools (click_at, type_text, press, scroll), one call per turn, and "
    "call done when the task is finished."
)
AFTER_ACTION = "The screen now:"
S = TypeVar("S", bound=Screen)
NOT_RUN = f"{ERROR_PREFIX} not run: the episode ended with an earlier call of this turn"


class ScreenEnv(Env):
    """An environment over the ``Screen`` that ``make_screen(task)`` builds for each episode.

    Args:
        make_screen: Builds the episode's screen from its task.
        name: The environment's name.
        actions: The GUI actions offered (default: the pixel actions).
        max_turns: Assistant turns before the episode is cut off.
        system_prompt: Opening system message (``task.system`` wins when set).
        expert: ``(task, messages) -> str | None``: the scripted expert's next reply.
        description: One line saying what the environment is.
    """

    def __init__(
        self,
        make_screen: Callable[[Task], Screen],
        *,
        name: str = "screen",
        actions: Sequence[str] = PIXEL_ACTIONS,
        max_turns: int = 10,
        system_prompt: str = SYSTEM_PROMPT,
        expert: ExpertFn | None = None,
        description: str = "",
    ) -> None:
        super().__init__()
        if max_turns < 1:
            raise EnvError(f"max_turns: must be at least 1, got {max_turns}")
        self.name = name
        self.description = description
        self.actions = tuple(actions)
        self.tools = action_specs(self.actions)
        self.max_turns = max_turns
        self.system_prompt = system_prompt
        self._make_screen = make_screen
        self._expert = expert
        self._screen: Screen | None = None
        self.turn = 0
        self.done = False

    @property
    def screen(self) -> Screen:
        if self._screen is None:
            raise EnvError(f"env {self.name!r}: reset(task) must be called before the episode")
        return self._screen

    def adopt_limits(self, *, max_turns: int | None, tool_timeout_s: float | None) -> None:
        if max_turns is not None:
            self.max_turns = max_turns

    async def reset(self, task: Task) -> list[Message]:
        await self.close()
        self._screen = await asyncio.to_thread(self._make_screen, task)
        self.turn = 0
        self.done = False
        width, height = self.screen.size
        text = f"{self.screen.instruction}\nThe screen is {width}x{height} pixels."
        opening = [Message(role=Role.USER, content=[TextPart(text=text), await self._shot()])]
        system = task.system if task.system is not None else self.system_prompt
        return [Message(role=Role.SYSTEM, content=system), *opening] if system else opening

    async def _shot(self) -> ImagePart:
        return ImagePart.from_bytes(await asyncio.to_thread(self.screen.screenshot))

    async def step(self, action: Message) -> StepResult:
        screen = self.screen
        if self.done:
            raise EnvError(f"env {self.name!r}: step() after the episode ended; call reset(task)")
        if action.role is not Role.ASSISTANT:
            raise EnvError(
                f"env {self.name!r}: step() takes an assistant message, got {action.role}"
            )
        key = await asyncio.to_thread(screen.state_key)
        self.turn += 1
        if not action.tool_calls:
            return await self._finish(key, [], action.text, {}, truncated=False)
        results: list[Message] = []
        ended, answer = False, None
        for call in action.tool_calls:
            text = NOT_RUN
            if not ended:
                text, ended, answer = await self._run(call)
            results.append(
                Message(role=Role.TOOL, content=text, tool_call_id=call.id, name=call.name or None)
            )
        info = {
            "tool_calls": len(results),
            "tool_errors": sum(m.text.startswith(ERROR_PREFIX) for m in results),
        }
        if ended or self.turn >= self.max_turns:
            return await self._finish(key, results, answer, info, truncated=not ended)
        shown = Message(role=Role.USER, content=[TextPart(text=AFTER_ACTION), await self._shot()])
        return StepResult(observations=[*results, shown], info=info, state_key=key)

    async def _run(self, call: ToolCall) -> tuple[str, bool, str | None]:
        """One call: (what the model reads, whether the episode ends, the ``done`` answer)."""
        try:
            act = parse_action(call, self.actions)
            if isinstance(act, Done):
                return "done", True, act.answer
            text = await asyncio.to_thread(self.screen.apply, act)
        except ActionError as exc:
            return f"{ERROR_PREFIX} {exc}", False, None
        return text, self.screen.finished, None

    async def _finish(
        self,
        key: str,
        observations: list[Message],
        answer: str | None,
        info: dict[str, Any],
        *,
        truncated: bool,
    ) -> StepResult:
        self.done = True
        reward = await asyncio.to_thread(self.screen.reward, answer)
        if not 0.0 <= reward <= 1.0:
            raise EnvError(f"env {self.name!r}: the screen's reward {reward} is outside [0, 1]")
        info = {**info, "truncated": truncated, "turns": self.turn}
        return StepResult(
            observations=observations, reward=reward, done=True, info=info, state_key=key
        )

    async def close(self) -> None:
        if self._screen is not None:
            screen, self._screen = self._screen, None
            await asyncio.to_thread(screen.close)

    def expert(self, task: Task, messages: list[Message]) -> str | None:
        return self._expert(task, messages) if self._expert is not None else None


def replay(screen: S, messages: Sequence[Message], actions: Sequence[str] = PIXEL_ACTIONS) -> S:
    """``screen`` (fresh from the episode's task) with every call the environment accepted in
    ``messages`` applied again, in order: how a scripted expert, a pure function of the task
    and the conversation, finds the state it acts from."""
    answered = {m.tool_call_id: m.text for m in messages if m.role is Role.TOOL}
    for message in messages:
        for call in message.tool_calls:
            result = answered.get(call.id)
            if result is None or result.startswith(ERROR_PREFIX):
                continue
            act = parse_action(call, actions)
            if not isinstance(act, Done):
                screen.apply(act)
    return screen
