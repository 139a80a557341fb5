"""The main job's teacher: imperfect, as real demonstration logs are.

It uses the calculator for every step of the longer (three-step) problems, but answers most
two-step problems straight away, in its head. Its answers are right, so every demonstration
passes the verifier and is kept for SFT. A student that copies the habit cannot do the
arithmetic in its head: only its own trajectories (RL) show it that the tool pays.
"""

from __future__ import annotations

import hashlib

from trajforge.envs.builtin.arith import format_number
from trajforge.envs.builtin.calculator import expert
from trajforge.schema import Message, Role, Task

# Share of two-step problems answered without the tool: high enough that SFT run to the end of
# the demonstrations settles on the shortcut (at 0.6 greedy success after SFT swung from 41% to
# 80% with a few more steps; at 0.7 it held at 30-41% on three seeds' validation tasks), and
# low enough that sampling still tries the tool on two-step problems (at 0.8 it seldom did, and
# RL gained less).
SHORTCUT_FRACTION = 0.7


def takes_shortcut(task: Task) -> bool:
    """Whether the teacher answers ``task`` in its head: two-step problems, by a stable coin
    per task id."""
    digest = hashlib.sha256(f"shortcut:{task.id}".encode()).digest()
    coin = int.from_bytes(digest[:8], "big") / 2**64
    return len(task.data["steps"]) == 2 and coin < SHORTCUT_FRACTION


def shortcut_expert(task: Task, messages: list[Message]) -> str | None:
    """The calculator's expert, except that shortcut problems are answered at once."""
    if takes_shortcut(task) and not any(m.role is Role.TOOL for m in messages):
        return f"The answer is {format_number(task.answer)}."
    return expert(task, messages)
