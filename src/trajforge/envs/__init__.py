"""Layer 3: environments. The ``Env`` contract, ``@tool``, ``ToolEnv``, task sets, the registry."""

from typing import TYPE_CHECKING

from trajforge.envs.base import Env, StepResult
from trajforge.envs.taskset import TaskSet
from trajforge.envs.tool import Tool, ToolContext, ToolError, tool
from trajforge.envs.tool_env import ERROR_PREFIX, EnvError, ToolEnv
from trajforge.registry import lazy_names

if TYPE_CHECKING:
    from trajforge.envs.builtin.repo import REPO_ENV
    from trajforge.envs.mcp.server import serve_http, serve_stdio
    from trajforge.envs.multiseat.base import (
        GameResult,
        MultiSeatEnv,
        opponent_by_name,
        result_of,
        seat_expert,
    )
    from trajforge.envs.openenv.server import serve_openenv
    from trajforge.envs.registry import (
        TAU2_PREFIX,
        USER_ENV_KINDS,
        EnvEntry,
        EnvSource,
        env_names,
        get_env,
        stored_env_name,
    )
    from trajforge.envs.repo_harbor import write_harbor_tasks
    from trajforge.envs.repo_tests import (
        RepoTestRun,
        copy_repo,
        find_sources,
        find_tests,
        run_repo_tests,
        run_sandboxed_tests,
    )
    from trajforge.envs.sandbox import (
        Mount,
        SandboxConfig,
        SandboxUnavailableError,
        episode_uid,
        sandbox_argv,
    )
    from trajforge.envs.synthesizers import (
        PROPOSERS,
        SYNTHESIZERS,
        Blueprint,
        Candidate,
        Synthesizer,
        proposer_for,
        synthesizer_for,
    )
    from trajforge.envs.synthesizers.base import content_id
    from trajforge.envs.user_sim import UserResponder, UserSimEnv

__all__ = [
    "ERROR_PREFIX",
    "PROPOSERS",
    "REPO_ENV",
    "SYNTHESIZERS",
    "TAU2_PREFIX",
    "USER_ENV_KINDS",
    "Blueprint",
    "Candidate",
    "Env",
    "EnvEntry",
    "EnvError",
    "EnvSource",
    "GameResult",
    "Mount",
    "MultiSeatEnv",
    "RepoTestRun",
    "SandboxConfig",
    "SandboxUnavailableError",
    "StepResult",
    "Synthesizer",
    "TaskSet",
    "Tool",
    "ToolContext",
    "ToolEnv",
    "ToolError",
    "UserResponder",
    "UserSimEnv",
    "content_id",
    "copy_repo",
    "env_names",
    "episode_uid",
    "find_sources",
    "find_tests",
    "get_env",
    "opponent_by_name",
    "proposer_for",
    "result_of",
    "run_repo_tests",
    "run_sandboxed_tests",
    "sandbox_argv",
    "seat_expert",
    "serve_http",
    "serve_openenv",
    "serve_stdio",
    "stored_env_name",
    "synthesizer_for",
    "tool",
    "write_harbor_tasks",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "Blueprint": "synthesizers",
        "Candidate": "synthesizers",
        "PROPOSERS": "synthesizers",
        "proposer_for": "synthesizers",
        "EnvEntry": "registry",
        "EnvSource": "registry",
        "GameResult": "multiseat.base",
        "Mount": "sandbox",
        "MultiSeatEnv": "multiseat.base",
        "SandboxConfig": "sandbox",
        "SandboxUnavailableError": "sandbox",
        "TAU2_PREFIX": "registry",
        "USER_ENV_KINDS": "registry",
        "UserResponder": "user_sim",
        "UserSimEnv": "user_sim",
        "env_names": "registry",
        "episode_uid": "sandbox",
        "get_env": "registry",
        "opponent_by_name": "multiseat.base",
        "result_of": "multiseat.base",
        "sandbox_argv": "sandbox",
        "seat_expert": "multiseat.base",
        "serve_http": "mcp.server",
        "serve_openenv": "openenv.server",
        "serve_stdio": "mcp.server",
        "stored_env_name": "registry",
        "SYNTHESIZERS": "synthesizers",
        "Synthesizer": "synthesizers",
        "synthesizer_for": "synthesizers",
        "content_id": "synthesizers.base",
        "REPO_ENV": "builtin.repo",
        "RepoTestRun": "repo_tests",
        "copy_repo": "repo_tests",
        "find_sources": "repo_tests",
        "find_tests": "repo_tests",
        "run_repo_tests": "repo_tests",
        "run_sandboxed_tests": "repo_tests",
        "write_harbor_tasks": "repo_harbor",
    },
)
