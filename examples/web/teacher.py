"""The web job's teacher: imperfect, as real demonstration logs are.

It plays the scripted experts' plans (trajforge.envs.browser.experts), but on most forms (tasks
of two or three actions) it fills in the whole form in one reply, every call at once, without
looking at the page in between. That works for it: its demonstrations all succeed and are kept
for SFT. A student that copies the habit writes replies too long for its token budget per turn
(the job's ``max_new_tokens``): the first call goes through, the rest is cut off, and it starts
the form over the next turn. Only its own trajectories (RL) show it that one action a turn pays.
"""

from __future__ import annotations

import hashlib

from trajforge.envs.browser.experts import DONE, expert, plan
from trajforge.formats import format_tool_call
from trajforge.schema import Message, Role, Task

# Share of forms filled in one reply: as in the calculator job's teacher, high enough that SFT
# settles on the habit, low enough that sampling still tries one action a turn.
BATCH_FRACTION = 0.7


def batches_form(task: Task, actions: int) -> bool:
    """Whether the teacher does ``task``'s ``actions`` in one reply: forms of two or more
    actions, by a stable coin per task id."""
    digest = hashlib.sha256(f"batch:{task.id}".encode()).digest()
    coin = int.from_bytes(digest[:8], "big") / 2**64
    return actions >= 2 and coin < BATCH_FRACTION


def batching_expert(task: Task, messages: list[Message]) -> str | None:
    """The expert, except that a batched form is done in one reply, then ``done``."""
    actions = plan(task, messages)
    if not batches_form(task, len(actions)):
        return expert(task, messages)
    if any(m.role is Role.TOOL for m in messages):
        return DONE
    return "".join(format_tool_call(name, arguments) for name, arguments in actions)
