"""Environments for the Ray tests, loaded by path on the actors (``ray_envs.py:factory``):
the calculator with a tool that sleeps (episodes long enough to kill a worker mid-run)."""

from __future__ import annotations

import time

from trajforge.envs.builtin import calculator as calc
from trajforge.envs.tool import tool
from trajforge.envs.tool_env import ToolEnv

TASKS = calc.generate_tasks(64, seed=0)
TOOL_DELAY_S = 0.25


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression, slowly.

    Args:
        expression: Numbers with + - * / // % ** and parentheses, e.g. "12 * 7 - 5".
    """
    time.sleep(TOOL_DELAY_S)
    return calc.calculator.fn(expression)


def slow_calculator() -> ToolEnv:
    """The calculator whose every tool call takes a quarter of a second."""
    return ToolEnv(
        [calculator],
        tasks=TASKS,
        verifier=calc.verify,
        name="slow-calculator",
        expert=calc.expert,
        system_prompt=calc.SYSTEM_PROMPT,
    )
