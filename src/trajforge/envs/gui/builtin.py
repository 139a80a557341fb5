"""gui: pixel-only tasks on a screen drawn in code (click a labelled button, type a word and
submit it, tick the named checkboxes, close or answer a dialog), seen as screenshots and acted
on by coordinates.

The expert rebuilds the task's screen from its seed, applies again the actions the environment
accepted so far, and takes the task's next move from that state, by coordinates.
"""

from __future__ import annotations

import random
from typing import Any

from trajforge.envs.gui.env import ScreenEnv, replay
from trajforge.envs.gui.tasks import KINDS, GuiTask
from trajforge.envs.taskset import TRAIN, generate_unique
from trajforge.formats import format_tool_call
from trajforge.schema import Message, Task

NAME = "gui"
DESCRIPTION = "Pixel-only GUI tasks on a screen drawn in code (screenshots in, coordinates out)."
ANSWER_FREE_VERIFIER = True


def screen_for(task: Task) -> GuiTask:
    """The task's screen, fresh: laid out from its kind and seed."""
    kind, seed = task.data.get("kind"), task.data.get("seed")
    if kind not in KINDS:
        raise ValueError(
            f"task {task.id!r}: data.kind must be one of {', '.join(KINDS)}, got {kind!r}"
        )
    if not isinstance(seed, int):
        raise ValueError(f"task {task.id!r}: data.seed must be an integer, got {seed!r}")
    return KINDS[kind].build(seed)


def _make_one(rng: random.Random) -> Task:
    kind = rng.choice(sorted(KINDS))
    seed = rng.getrandbits(32)
    screen = KINDS[kind].build(seed)
    return Task(id="draft", prompt=screen.instruction, data={"kind": kind, "seed": seed})


def generate_tasks(n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
    """``n`` distinct screens of every kind; train and test never share one."""
    return generate_unique(NAME, _make_one, n, seed, split)


def expert(task: Task, messages: list[Message]) -> str | None:
    """The next move, by coordinates, from the screen's state after the accepted actions."""
    action = replay(screen_for(task), messages).next_action()
    return format_tool_call(action.name, action.arguments())


def make_env(**kwargs: Any) -> ScreenEnv:
    options: dict[str, Any] = {"max_turns": 12}
    options.update(kwargs)
    return ScreenEnv(screen_for, name=NAME, description=DESCRIPTION, expert=expert, **options)
