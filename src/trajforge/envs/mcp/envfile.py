"""An environment written as YAML: MCP servers, local tools by reference, tasks and a verifier.

```yaml
name: world-clock
system_prompt: Use the tools; end with HH:MM.
servers:
  - {name: time, command: python, args: [-m, mcp_server_time], scope: shared}
tasks: tasks.jsonl          # or a list of tasks
verifier: checks.py:verify  # optional: the final answer must contain task.answer
```

Relative paths (the tasks file, ``file.py:attr`` references, a server's ``cwd``) are read from
the YAML file's folder. A mistake is one ``ConfigError`` naming ``file:line: field``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trajforge.configfile import raise_problems, read_yaml, repeated, validate
from trajforge.envs.mcp.env import MCPEnv
from trajforge.envs.mcp.spec import MCPServerSpec
from trajforge.envs.taskset import TaskSet
from trajforge.envs.tool import Tool
from trajforge.errors import ConfigError
from trajforge.registry import load_ref
from trajforge.schema import Task, check_verifier


class EnvFile(BaseModel):
    """The keys of an env file.

    Args:
        name: The environment's name (default: the file's stem).
        description: One line saying what it is.
        system_prompt: The opening system message.
        servers: The MCP servers whose tools it offers.
        tools: Local tools beside them, as ``module:attr`` or ``file.py:attr`` (a function or
            a ``Tool``).
        tasks: A JSONL file of tasks, or the tasks themselves.
        verifier: ``module:attr`` or ``file.py:attr`` of a verifier (default: exact match).
        max_turns: Assistant turns before an episode is cut off.
        tool_timeout: Seconds a tool call may run (a server's ``call_timeout_s`` wins).
    """

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1)
    description: str = ""
    system_prompt: str | None = None
    servers: list[MCPServerSpec] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)
    tasks: str | list[Task] = Field(default_factory=list)
    verifier: str | None = None
    max_turns: int = Field(default=8, ge=1)
    tool_timeout: float = Field(default=10.0, gt=0)

    @field_validator("servers")
    @classmethod
    def _distinct_servers(cls, servers: list[MCPServerSpec]) -> list[MCPServerSpec]:
        twice = repeated([s.name for s in servers])
        if twice:
            raise ValueError(f"two servers are named {twice[0]!r}")
        return servers


def _beside(folder: Path, ref: str) -> str:
    """``ref`` with a relative ``file.py`` target read from ``folder``."""
    target, sep, attr = ref.rpartition(":")
    if sep and target.endswith(".py") and not Path(target).expanduser().is_absolute():
        return f"{folder / target}:{attr}"
    return ref


class EnvFileFactory:
    """Makes fresh ``MCPEnv``s of one env file (read and checked once, in ``__init__``).

    Raises:
        ConfigError: the file is missing, not valid YAML, has an unknown or bad key, or names a
            tasks file or a reference that cannot be loaded (``file:line: field: message``).
    """

    def __init__(self, path: Path) -> None:
        data, origin = read_yaml(path)
        config = validate(data, EnvFile, origin)
        folder = path.resolve().parent
        self.name = config.name or path.stem
        self.description = config.description
        self._config = config
        self._servers = [
            s
            if s.cwd is None or s.cwd.is_absolute()
            else s.model_copy(update={"cwd": folder / s.cwd})
            for s in config.servers
        ]
        problems: list[str] = []
        self._tools: list[Tool | Any] = []
        for i, ref in enumerate(config.tools):
            try:
                found = load_ref(_beside(folder, ref), "tool")
            except ConfigError as exc:
                problems.append(origin.problem(("tools", i), str(exc)))
                continue
            if not callable(found):
                problems.append(origin.problem(("tools", i), f"{ref} is not callable"))
                continue
            self._tools.append(found)
        self._verifier: Any = None
        if config.verifier is not None:
            try:
                self._verifier = load_ref(_beside(folder, config.verifier), "verifier")
                check_verifier(self._verifier)
            except ConfigError as exc:
                problems.append(origin.problem(("verifier",), str(exc)))
        self.tasks: list[Task] = []
        if isinstance(config.tasks, str):
            tasks_path = Path(config.tasks).expanduser()
            tasks_path = tasks_path if tasks_path.is_absolute() else folder / tasks_path
            if not tasks_path.is_file():
                problems.append(origin.problem(("tasks",), f"no file {tasks_path}"))
            else:
                self.tasks = list(TaskSet.from_jsonl(tasks_path, env=self.name))
        else:
            self.tasks = config.tasks
        raise_problems(problems)

    def __call__(self) -> MCPEnv:
        config = self._config
        return MCPEnv(
            self._servers,
            tools=self._tools,
            tasks=self.tasks,
            verifier=self._verifier,
            max_turns=config.max_turns,
            tool_timeout=config.tool_timeout,
            system_prompt=config.system_prompt,
            name=self.name,
            description=config.description,
        )
