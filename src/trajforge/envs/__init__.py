"""Layer 3: environments. The ``Env`` contract, ``@tool``, ``ToolEnv``, task sets, the registry."""

from trajforge.envs.base import Env, StepResult
from trajforge.envs.taskset import TaskSet
from trajforge.envs.tool import Tool, ToolContext, ToolError, tool
from trajforge.envs.tool_env import EnvError, ToolEnv

__all__ = [
    "Env",
    "EnvError",
    "StepResult",
    "TaskSet",
    "Tool",
    "ToolContext",
    "ToolEnv",
    "ToolError",
    "tool",
]
