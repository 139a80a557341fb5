"""An env whose episodes outgrow a small context: each ``look`` returns a long page, and the task
is done once the agent answers after ``pages`` looks. Scripted agents for it: one that looks and
answers, one that folds after every second look."""

from __future__ import annotations

import re
from collections.abc import Callable

from trajforge.envs.base import Env, StepResult
from trajforge.formats.tool_calls import format_tool_call
from trajforge.rollout.context import SUMMARISE_PROMPT
from trajforge.schema import FunctionSpec, Message, Role, Task, ToolSpec

PAGES = 4
_PAGE = re.compile(r"page (\d+):")
LOOK = ToolSpec(
    function=FunctionSpec(
        name="look",
        description="Read page i.",
        parameters={
            "type": "object",
            "properties": {"i": {"type": "integer"}},
            "required": ["i"],
        },
    )
)


def page(i: int) -> str:
    return f"page {i}: " + " ".join(f"word{i}x{k}" for k in range(30))


class PagesEnv(Env):
    name = "pages"

    def __init__(self) -> None:
        super().__init__()
        self.tools = [LOOK]

    async def reset(self, task: Task) -> list[Message]:
        return [
            Message(role=Role.SYSTEM, content="Read every page, then say done."),
            Message(role=Role.USER, content=task.prompt),
        ]

    async def step(self, action: Message) -> StepResult:
        if not action.tool_calls:
            return StepResult(observations=[], reward=1.0, done=True)
        answers = [
            Message(role=Role.TOOL, tool_call_id=c.id, content=page(int(c.arguments.get("i", 0))))
            for c in action.tool_calls
        ]
        return StepResult(observations=answers, reward=0.0)


def looks(messages: list[Message]) -> int:
    return sum(1 for m in messages if m.role is Role.TOOL)


def looker(task: Task | None, messages: list[Message]) -> str:
    """Looks at the pages one by one (the next after the last one in its context), then says
    done."""
    seen = [int(i) for m in messages if m.role is not Role.ASSISTANT for i in _PAGE.findall(m.text)]
    following = max(seen, default=-1) + 1
    return "done" if following >= PAGES else format_tool_call("look", {"i": following})


def summariser(task: Task | None, messages: list[Message]) -> str:
    """``looker``, which asked for a summary of its transcript names the last page it read."""
    if messages and messages[0].role is Role.SYSTEM and messages[0].text == SUMMARISE_PROMPT:
        seen = [int(i) for i in _PAGE.findall(messages[-1].text)]
        return f"I read up to page {max(seen, default=-1)}: nothing else matters"
    return looker(task, messages)


def folder(task: Task | None, messages: list[Message]) -> str:
    """Looks at the pages, folding after every look; its fold notes count the pages."""
    notes = next((m.text for m in messages if m.role is Role.USER and "notes" in m.text), "")
    seen = notes.count("read") + looks(messages)
    if seen >= PAGES:
        return "done"
    if looks(messages):
        return format_tool_call("fold", {"summary": "read " * seen})
    return format_tool_call("look", {"i": seen})


class UserTurnsEnv(Env):
    """A user who answers each reply with ``say(turn)`` (``more``), rewarding it 0.25, and is
    done after ``turns`` replies (a model that calls no tools still has many turns)."""

    name = "user-turns"

    def __init__(self, turns: int = 3, say: Callable[[int], str] = lambda _: "more") -> None:
        super().__init__()
        self.turns = turns
        self.say = say
        self.turn = 0

    async def reset(self, task: Task) -> list[Message]:
        self.turn = 0
        return [Message(role=Role.USER, content=task.prompt)]

    async def step(self, action: Message) -> StepResult:
        self.turn += 1
        if self.turn >= self.turns:
            return StepResult(observations=[], reward=1.0, done=True)
        said = Message(role=Role.USER, content=self.say(self.turn))
        return StepResult(observations=[said], reward=0.25)


def chatter(turns: int) -> UserTurnsEnv:
    """A user who answers every reply with a page."""
    return UserTurnsEnv(turns, page)
