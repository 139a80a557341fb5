"""Harbor task folders as environments: ``--env harbor:PATH``, one task or a folder of them.

A Harbor task (harborframework.com/docs/task-format; harbor's ``TaskPaths`` and ``Verifier``)
is a folder: ``task.toml`` (timeouts, resources, env vars), ``instruction.md`` (the prompt),
``environment/`` (a ``Dockerfile``), ``tests/test.sh`` (the verifier: run with the tests at
``/tests``, it writes the reward to ``/logs/verifier/reward.txt`` or ``reward.json``) and,
optionally, ``solution/solve.sh`` (the reference solution Harbor's oracle agent runs).

Here the instruction is the prompt, the agent has one ``bash`` tool, and every command, the
tests and the solution run in trajforge's bubblewrap sandbox (no network) over a fresh workspace
per episode; the reward is what the task's tests write. The expert sends ``solve.sh``'s text as
its command, and only that exact command sees ``solution/`` at ``/solution``.

No Docker runs here, so no image is built: the host's ``/usr`` stands in for the image. Of the
Dockerfile, ``WORKDIR`` sets the working directory (``/app`` when there is none), ``COPY`` and
``ADD`` of the task's own files into it are copied into the workspace, and ``ENV`` sets
variables; ``FROM``, ``RUN`` and the rest are not reproduced, and each task lists what was
skipped in ``metadata["harbor"]["not_reproduced"]``: a task needing what its ``RUN`` lines
install, or a network, fails its tests here. A multi-container task (``docker-compose.yaml``)
is refused.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from trajforge.envs.sandbox import (
    Mount,
    SandboxConfig,
    SandboxResult,
    episode_uid,
    run_command,
)
from trajforge.envs.taskset import TEST, TRAIN
from trajforge.envs.tool import Tool, ToolContext, ToolError
from trajforge.envs.tool_env import ToolEnv
from trajforge.errors import ConfigError
from trajforge.formats import format_tool_call
from trajforge.schema import Evaluator, EvaluatorKind, Evidence, Message, Role, Score, Task

PREFIX = "harbor:"
REQUIRED = ("task.toml", "instruction.md", "environment", "tests/test.sh")
DEFAULT_WORKDIR = "/app"
SYSTEM_PROMPT = (
    "Complete the task by running shell commands with the bash tool (each call is a fresh "
    "shell in the task's working directory; files persist, variables do not). When it is "
    "done, reply without a tool call."
)
MAX_SHOWN = 8000
COMMAND_TIMEOUT_S = 120.0
_CANARY = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.I)
_TEMPLATE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


@dataclass(frozen=True)
class HarborTask:
    """One task folder, read and checked."""

    path: Path
    name: str
    instruction: str
    workdir: str
    copies: tuple[tuple[Path, str], ...]
    """``(file or folder under environment/, path under the workdir)``."""
    env: dict[str, str]
    verifier_env: dict[str, str]
    solution_env: dict[str, str]
    verifier_timeout_s: float
    memory_mb: int
    not_reproduced: tuple[str, ...]
    split: str | None

    @property
    def solve_script(self) -> Path:
        return self.path / "solution" / "solve.sh"

    def task(self, env_name: str) -> Task:
        meta = {"workdir": self.workdir, "not_reproduced": list(self.not_reproduced)}
        return Task(id=self.name, prompt=self.instruction, env=env_name, split=self.split,
                    data={"path": str(self.path)}, metadata={"harbor": meta})  # fmt: skip


def find_tasks(root: Path) -> list[HarborTask]:
    """The task at ``root``, or the tasks in its subfolders (sorted by name).

    Raises:
        ConfigError: ``root`` is no folder, holds no task, or a task lacks a file (named).
    """
    if not root.is_dir():
        raise ConfigError(f"{PREFIX}{root}: no such folder")
    if (root / "task.toml").is_file():
        return [read_task(root)]
    folders = sorted(p for p in root.iterdir() if p.is_dir() and (p / "task.toml").is_file())
    if not folders:
        raise ConfigError(
            f"{PREFIX}{root}: not a Harbor task: task.toml is missing (a task folder holds "
            f"{', '.join(REQUIRED)}), and no subfolder holds one"
        )
    return [read_task(folder) for folder in folders]


def read_task(folder: Path) -> HarborTask:
    """One task folder; ``ConfigError`` names the first missing file or bad setting."""
    for required in REQUIRED:
        if not (folder / required).exists():
            raise ConfigError(f"{PREFIX}{folder}: not a Harbor task: {required} is missing")
    compose = folder / "environment" / "docker-compose.yaml"
    if compose.exists():
        raise ConfigError(f"{compose}: a multi-container task needs Docker, which is not run here")
    try:
        config = tomllib.loads((folder / "task.toml").read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{folder / 'task.toml'}: not valid TOML: {exc}") from None
    section = _section(config, folder)
    lines = (folder / "instruction.md").read_text(encoding="utf-8").splitlines()
    while lines and (_CANARY.match(lines[0].strip()) or not lines[0].strip()):
        lines.pop(0)  # canary lines guard benchmarks against training sets; not for the agent
    workdir, copies, env, skipped = _dockerfile(folder / "environment")
    image = section("environment").get("docker_image")
    if image:
        skipped.insert(0, f"docker_image = {image!r} (not pulled)")
    split = config.get("split")
    return HarborTask(
        path=folder.resolve(),
        name=str(section("task").get("name") or folder.name),
        instruction="\n".join(lines).strip(),
        workdir=workdir,
        copies=tuple(copies),
        env=env,
        verifier_env=_resolved(section("verifier").get("env") or {}),
        solution_env=_resolved(section("solution").get("env") or {}),
        verifier_timeout_s=float(section("verifier").get("timeout_sec", 600.0)),
        memory_mb=int(section("environment").get("memory_mb", 2048)),
        not_reproduced=tuple(skipped),
        split=None if split is None else (TRAIN if split == TRAIN else TEST),
    )


def _section(config: dict[str, Any], folder: Path) -> Callable[[str], dict[str, Any]]:
    def get(name: str) -> dict[str, Any]:
        value = config.get(name) or {}
        if not isinstance(value, dict):
            raise ConfigError(f"{folder / 'task.toml'}: [{name}] must be a table")
        return value

    return get


def _resolved(env: dict[str, Any]) -> dict[str, str]:
    """``${VAR}`` and ``${VAR:-default}`` filled from this process's environment, as Harbor
    does."""
    return {
        key: _TEMPLATE.sub(lambda m: os.environ.get(m.group(1), m.group(2) or ""), str(value))
        for key, value in env.items()
    }


def _dockerfile(environment: Path) -> tuple[str, list[tuple[Path, str]], dict[str, str], list[str]]:
    """What of ``environment/Dockerfile`` is reproduced without Docker: the working directory,
    the task files copied under it and the variables; and the instructions that are not."""
    workdir, copies, env, skipped = DEFAULT_WORKDIR, [], {}, []
    dockerfile = environment / "Dockerfile"
    text = dockerfile.read_text(encoding="utf-8") if dockerfile.is_file() else ""
    for line in re.sub(r"\\\r?\n", " ", text).splitlines():
        words = line.strip().split(None, 1)
        if not words or words[0].startswith("#"):
            continue
        keyword, rest = words[0].upper(), (words[1] if len(words) > 1 else "")
        if keyword == "WORKDIR":
            workdir = str(PurePosixPath(workdir) / rest.strip())
        elif keyword == "ENV":
            env.update(_env_pairs(rest))
        elif keyword in ("COPY", "ADD") and (found := _copy(environment, workdir, rest)):
            copies += found
        else:
            skipped.append(" ".join(line.split()))
    return workdir, copies, env, skipped


def _env_pairs(rest: str) -> dict[str, str]:
    words = shlex.split(rest)
    if words and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    return dict(word.split("=", 1) for word in words if "=" in word)


def _copy(environment: Path, workdir: str, rest: str) -> list[tuple[Path, str]] | None:
    """A ``COPY``'s task files and where under the workdir they go, or ``None`` when it cannot
    be reproduced (another stage, a URL, a destination outside the workdir)."""
    words = [w for w in shlex.split(rest) if not w.startswith("--")]
    if len(words) < 2 or rest.lstrip().startswith("--from") or "://" in rest:
        return None
    dest = PurePosixPath(workdir) / words[-1]
    base = PurePosixPath(workdir)
    if dest != base and base not in dest.parents:
        return None
    target = str(dest.relative_to(base))
    sources = [environment / s for s in words[:-1]]
    if not all(s.resolve().is_relative_to(environment.resolve()) and s.exists() for s in sources):
        return None
    into_folder = words[-1].endswith("/") or len(sources) > 1 or target == "."
    return [(s, str(PurePosixPath(target) / s.name) if into_folder and s.is_file() else target)
            for s in sources]  # fmt: skip


@dataclass
class Workspace:
    """An episode's folders on the host: the working directory and ``/logs``."""

    task: HarborTask
    root: Path
    uid: int | None
    app: Path = field(init=False)
    logs: Path = field(init=False)

    def __post_init__(self) -> None:
        self.app, self.logs = self.root / "app", self.root / "logs"
        for folder in (self.app, self.logs / "agent", self.logs / "verifier"):
            folder.mkdir(parents=True, exist_ok=True)
        for source, target in self.task.copies:
            dest = self.app / target
            dest.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, dest, dirs_exist_ok=True)
            else:
                shutil.copy2(source, dest)
        if self.uid is not None:  # the sandbox runs as this uid: what it shares must be its
            for path in [self.root, *self.root.rglob("*")]:
                os.chown(path, self.uid, self.uid, follow_symlinks=False)

    async def run(self, script: str, config: SandboxConfig, *extra: Mount,
                  env: dict[str, str] | None = None) -> SandboxResult:  # fmt: skip
        mounts = (Mount(self.app, self.task.workdir, True), Mount(self.logs, "/logs", True))
        return await run_command(["/bin/bash", "-c", script], config, mounts=(*mounts, *extra),
                                 cwd=self.task.workdir, env={**self.task.env, **(env or {})},
                                 uid=self.uid)  # fmt: skip


def _workspace(context: ToolContext) -> Workspace:
    workspace = context.state.get("harbor")
    if not isinstance(workspace, Workspace):
        raise ToolError("the episode has no workspace (reset it first)")
    return workspace


def _shown(text: str) -> str:
    cut = len(text) - MAX_SHOWN
    return text if cut <= 0 else f"[... {cut} characters cut]\n{text[-MAX_SHOWN:]}"


def shell_reply(result: SandboxResult) -> str:
    """What a ``bash`` tool answers with a command's result: its output, stderr and a non-zero
    exit code, the tail kept; a command killed by a limit is a ``ToolError``."""
    if result.killed_reason is not None:
        raise ToolError(f"the command did not finish ({result.summary()})\n"
                        f"{_shown(result.stdout + result.stderr)}".rstrip())  # fmt: skip
    stderr = f"[stderr]\n{result.stderr.rstrip()}" if result.stderr else ""
    code = f"[exit code {result.exit_code}]" if result.exit_code else ""
    shown = "\n".join(p for p in (result.stdout.rstrip("\n"), stderr, code) if p)
    return _shown(shown) or "(no output)"


class HarborEnv(ToolEnv):
    """The tasks of one Harbor folder: a ``bash`` tool over a fresh sandboxed workspace per
    episode, rewarded by the task's own ``tests/test.sh``.

    Args:
        tasks: The folder's tasks (``find_tasks``).
        name: The environment's name (``harbor:PATH``).
        command_timeout_s: Wall-clock limit of one ``bash`` call.
        sandbox: Limits of each command (default: the task's memory, the command timeout).
        **options: ``ToolEnv`` options (``max_turns``, ``system_prompt``, ...).
    """

    def __init__(self, tasks: list[HarborTask], name: str, *,
                 command_timeout_s: float = COMMAND_TIMEOUT_S,
                 sandbox: SandboxConfig | None = None, **options: Any) -> None:  # fmt: skip
        self.harbor_tasks = {t.name: t for t in tasks}
        self.command_timeout_s = command_timeout_s
        self.sandbox = sandbox
        bash = Tool(self._bash, name="bash", timeout=command_timeout_s + 10.0)
        options.setdefault("max_turns", 30)
        options.setdefault("system_prompt", SYSTEM_PROMPT)
        super().__init__([bash], [t.task(name) for t in tasks], self._verify, name=name,
                         description=f"Harbor tasks in {name.removeprefix(PREFIX)} (bash tool, "
                         "tests/test.sh reward, bubblewrap sandbox)", expert=expert,
                         setup=self._setup, teardown=_teardown, **options)  # fmt: skip

    def _config(self, task: HarborTask, timeout_s: float) -> SandboxConfig:
        if self.sandbox is not None:
            return self.sandbox
        return SandboxConfig(timeout_s=timeout_s, cpu_s=max(1, int(timeout_s)),
                             memory_mb=max(task.memory_mb, 512), max_processes=256,
                             max_file_mb=512, tmp_size_mb=512)  # fmt: skip

    def _setup(self, context: ToolContext) -> None:
        task = self.harbor_tasks.get(context.task.id)
        if task is None:
            task = read_task(Path(context.task.data["path"]))
        root = Path(tempfile.mkdtemp(prefix="trajforge-harbor-"))
        context.state["harbor"] = Workspace(task, root, episode_uid())

    async def _bash(self, command: str, context: ToolContext) -> str:
        """Run a shell command in the task's working directory and return what it printed.

        Args:
            command: A bash script (one call is one fresh shell; files persist between calls).
        """
        workspace = _workspace(context)
        task, extra, env = workspace.task, [], {}
        if task.solve_script.is_file() and command == task.solve_script.read_text("utf-8"):
            extra, env = [Mount(task.solve_script.parent, "/solution")], task.solution_env
        config = self._config(task, self.command_timeout_s)
        return shell_reply(await workspace.run(command, config, *extra, env=env))

    async def _verify(self, evidence: Evidence) -> Score:
        workspace = evidence.state.get("harbor")
        if not isinstance(workspace, Workspace):
            raise ToolError("the episode has no workspace (reset it first)")
        task = workspace.task
        tests = Mount(task.path / "tests", "/tests")
        config = self._config(task, task.verifier_timeout_s)
        result = await workspace.run("bash /tests/test.sh", config, tests, env=task.verifier_env)
        value, where = _reward(workspace.logs / "verifier")
        why = f"tests/test.sh: {result.summary()}; {where}"
        judge = Evaluator(kind=EvaluatorKind.ENV, name="harbor tests/test.sh")
        if value is None:
            return Score(name="harbor", value=None, evaluator=judge,
                         error=f"{why}\n{(result.stdout + result.stderr)[-2000:]}")  # fmt: skip
        return Score(name="harbor", value=value, explanation=why, evaluator=judge)


def _reward(folder: Path) -> tuple[float | None, str]:
    """The reward the tests wrote (``reward.json``'s ``reward`` first, as Harbor reads them),
    and where it came from or why there is none."""
    as_json, as_text = folder / "reward.json", folder / "reward.txt"
    try:
        if as_json.is_file():
            value = json.loads(as_json.read_text()).get("reward")
            return (float(value), "reward.json") if value is not None else (None, "reward.json "
                    "has no 'reward'")  # fmt: skip
        if as_text.is_file():
            return float(as_text.read_text().strip()), "reward.txt"
    except (ValueError, TypeError, AttributeError) as exc:
        return None, f"the reward file does not parse: {exc}"
    return None, "no /logs/verifier/reward.txt or reward.json was written"


def _teardown(context: ToolContext) -> None:
    workspace = context.state.pop("harbor", None)
    if isinstance(workspace, Workspace):
        shutil.rmtree(workspace.root, ignore_errors=True)


def expert(task: Task, messages: list[Message]) -> str | None:
    """The reference solution: ``solve.sh``'s text as one ``bash`` call, then done."""
    if any(m.role is Role.TOOL for m in messages):
        return "Done."
    script = Path(task.data["path"]) / "solution" / "solve.sh"
    if not script.is_file():
        return None
    return format_tool_call("bash", {"command": script.read_text(encoding="utf-8")})
