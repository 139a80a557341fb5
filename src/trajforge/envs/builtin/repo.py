"""repo: fix a bug injected into a Python repository (SWE-smith's tasks), with a shell and an
edit tool in the sandbox; rewarded by the repository's hidden tests.

Each episode gets a fresh copy of the task's repository (``data["repo"]``) without its test
files, with one function changed (``data["original"]`` of ``data["file"]`` replaced by
``data["buggy"]``), at ``/repo`` in the sandbox. The prompt names the tests that fail and what
they said. At the end the test files are put back and all of them run: the reward is 1 when
they all pass (the hidden failing ones included), else 0. The tasks come from
``trajforge synthesize --bugs PACKAGE_DIR`` (``trajforge.synthesis.bugs``); this env has none of
its own.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trajforge.envs.bwrap import python_executable
from trajforge.envs.harbor import shell_reply
from trajforge.envs.repo_tests import (
    PASSED,
    WORKDIR,
    copy_file,
    copy_repo,
    failures,
    pytest_argv,
    pytest_site,
    run_in_repo,
)
from trajforge.envs.sandbox import SandboxConfig, episode_uid
from trajforge.envs.sandbox_config import SandboxResult
from trajforge.envs.taskset import TRAIN
from trajforge.envs.tool import Tool, ToolContext, ToolError
from trajforge.envs.tool_env import ToolEnv
from trajforge.errors import ConfigError
from trajforge.formats import format_tool_call
from trajforge.schema import Evaluator, EvaluatorKind, Evidence, Message, Role, Score, Task

NAME = "repo"
REPO_ENV = NAME
"""The env's name, as ``trajforge.envs`` exports it."""
DESCRIPTION = (
    "Fix a bug injected into a Python repository (bash and edit_file tools, hidden tests)."
)
ANSWER_FREE_VERIFIER = True
SYSTEM_PROMPT = (
    "You are in a Python repository at /repo with a bug. Find it with the bash tool (each call "
    "is a fresh shell in /repo; files persist) and fix it with edit_file. The repository's "
    "tests are hidden and run when you are done. When the bug is fixed, reply without a tool "
    "call."
)
_STATE = "repo"


def generate_tasks(n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
    """None: the tasks are synthesized from a package."""
    raise ConfigError(
        "env 'repo' has no tasks of its own: make them with trajforge synthesize --bugs "
        "PACKAGE_DIR --out tasks.jsonl, then use --env tasks.jsonl"
    )


def buggy_text(task: Task) -> str:
    """The task's file with its bug in, from its pristine repository.

    Raises:
        ConfigError: the file no longer holds the function the task was made from.
    """
    data = task.data
    path = Path(data["repo"]) / data["file"]
    if not path.is_file():
        raise ConfigError(f"task {task.id}: {path} is missing (the task's repository moved?)")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    start, end = data["lines"]
    if "".join(lines[start:end]) != data["original"]:
        raise ConfigError(f"task {task.id}: {path} changed since the task was synthesized")
    return "".join([*lines[:start], data["buggy"], *lines[end:]])


def _give_to(root: Path, uid: int | None) -> None:
    """The sandbox runs as ``uid`` (root hosts): what it shares must be its."""
    if uid is not None:
        for path in [root, *root.rglob("*")]:
            os.chown(path, uid, uid, follow_symlinks=False)


def _unlink_links(root: Path, rel: str) -> None:
    """Remove what the agent may have put on the way to ``rel`` under ``root``: a link (which
    would send the host's copy out of the workspace) or a file where a folder goes."""
    here = root
    for part in Path(rel).parts[:-1]:
        here = here / part
        if here.is_symlink() or (here.exists() and not here.is_dir()):
            here.unlink()


class Workspace:
    """An episode's copy of the buggy repository on the host, run in the sandbox at /repo."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.root = Path(tempfile.mkdtemp(prefix="trajforge-repo-"))
        self.uid = episode_uid()
        self.repo = self.root / "repo"
        source = Path(task.data["repo"])
        copy_repo(source, self.repo, tests=False)
        (self.repo / task.data["file"]).write_text(buggy_text(task), encoding="utf-8")
        _give_to(self.root, self.uid)

    def path(self, name: str) -> Path:
        """The host path of ``name`` (relative to /repo, or absolute under it); one that leaves
        the repository (``..``, a link out) is refused."""
        relative = name.removeprefix(WORKDIR).lstrip("/") if name.startswith("/") else name
        if name.startswith("/") and not (name == WORKDIR or name.startswith(WORKDIR + "/")):
            raise ToolError(f"{name}: only files under {WORKDIR} can be edited")
        target = (self.repo / relative).resolve()
        if not target.is_relative_to(self.repo.resolve()):
            raise ToolError(f"{name}: only files under {WORKDIR} can be edited")
        return target

    async def run(self, script: str, config: SandboxConfig) -> SandboxResult:
        return await run_in_repo(self.repo, script, config, self.uid)

    def restore_tests(self) -> None:
        source = Path(self.task.data["repo"])
        for rel in self.task.data["test_files"]:
            _unlink_links(self.repo, rel)
            copy_file(source / rel, self.repo / rel)
        _give_to(self.root, self.uid)


def _workspace(state: Mapping[str, Any]) -> Workspace:
    workspace = state.get(_STATE)
    if not isinstance(workspace, Workspace):
        raise ToolError("the episode has no repository (reset it first)")
    return workspace


class RepoEnv(ToolEnv):
    """One buggy repository per episode: ``bash`` and ``edit_file`` over it, the hidden tests
    as the verifier.

    Args:
        sandbox: Limits of each command and of the final test run.
        **options: ``ToolEnv`` options (``max_turns``, ``system_prompt``, ...).
    """

    def __init__(self, sandbox: SandboxConfig | None = None, **options: Any) -> None:
        pytest_site()  # refused at once, not at the first command, where pytest is missing
        self.sandbox = sandbox or SandboxConfig(timeout_s=60.0, cpu_s=60, memory_mb=2048,
                                                max_processes=64, tmp_size_mb=256)  # fmt: skip
        tools = [Tool(self._bash, name="bash", timeout=self.sandbox.timeout_s + 10.0),
                 Tool(self._edit_file, name="edit_file")]  # fmt: skip
        options.setdefault("max_turns", 20)
        options.setdefault("system_prompt", SYSTEM_PROMPT)
        super().__init__(tools, verifier=self._verify, name=NAME, description=DESCRIPTION,
                         expert=expert, setup=_setup, teardown=_teardown, **options)  # fmt: skip

    async def _bash(self, command: str, context: ToolContext) -> str:
        """Run a shell command in /repo and return what it printed.

        Args:
            command: A bash script (one call is one fresh shell; files persist between calls).
        """
        return shell_reply(await _workspace(context.state).run(command, self.sandbox))

    async def _edit_file(self, path: str, old: str, new: str, context: ToolContext) -> str:
        """Replace the one occurrence of ``old`` in a file of the repository with ``new``.

        Args:
            path: The file, relative to /repo (or absolute under it).
            old: The exact text to replace; it must occur exactly once in the file.
            new: The text to put in its place.
        """
        target = _workspace(context.state).path(path)
        if not target.is_file():
            raise ToolError(f"{path}: no such file")
        text = target.read_text(encoding="utf-8")
        count = text.count(old) if old else 0
        if count != 1:
            raise ToolError(f"{path}: the old text occurs {count} times; it must occur once")
        target.write_text(text.replace(old, new), encoding="utf-8")
        return f"{path}: replaced 1 occurrence"

    async def _verify(self, evidence: Evidence) -> Score:
        workspace = _workspace(evidence.state)
        workspace.restore_tests()
        argv = pytest_argv(str(python_executable()), evidence.task.data["test_files"])
        result = await workspace.run(shlex.join(argv), self.sandbox)
        judge = Evaluator(kind=EvaluatorKind.ENV, name="repo hidden tests")
        failed = failures(result.stdout + result.stderr)
        if result.exit_code == PASSED and result.killed_reason is None:
            return Score(name=NAME, value=1.0, explanation="all tests pass", evaluator=judge)
        hidden = [t for t in evidence.task.data["hidden_tests"] if t in failed]
        why = (f"the tests {result.summary()}; {len(failed)} failing"
               f" ({len(hidden)} of the hidden ones)")  # fmt: skip
        return Score(name=NAME, value=0.0, explanation=why, evaluator=judge)


def _setup(context: ToolContext) -> None:
    context.state[_STATE] = Workspace(context.task)


def _teardown(context: ToolContext) -> None:
    workspace = context.state.pop(_STATE, None)
    if isinstance(workspace, Workspace):
        shutil.rmtree(workspace.root, ignore_errors=True)


def smallest_edit(task: Task) -> tuple[str, str]:
    """The ``(old, new)`` of ``edit_file`` that undoes the task's bug: the lines that differ,
    widened by lines around them until ``old`` occurs once in the buggy file."""
    data = task.data
    buggy, original = data["buggy"].splitlines(True), data["original"].splitlines(True)
    head = 0
    while head < min(len(buggy), len(original)) and buggy[head] == original[head]:
        head += 1
    tail = 0
    while tail < min(len(buggy), len(original)) - head and buggy[-1 - tail] == original[-1 - tail]:
        tail += 1
    text = buggy_text(task)
    start, end = head, len(buggy) - tail
    while True:
        old = "".join(buggy[start:end])
        if (old and text.count(old) == 1) or (start == 0 and end == len(buggy)):
            new = "".join(original[start : len(original) - (len(buggy) - end)])
            return old, new
        start, end = max(start - 1, 0), min(end + 1, len(buggy))


def expert(task: Task, messages: list[Message]) -> str | None:
    """Read the function the failing tests point at, change the lines that differ back, stop."""
    data = task.data
    done = sum(m.role is Role.TOOL for m in messages)
    if done == 0:
        name = data["function"].rsplit(".", 1)[-1]
        shown = data["buggy"].count("\n")
        command = f"grep -n -A {shown} 'def {name}(' {shlex.quote(data['file'])}"
        return format_tool_call("bash", {"command": command})
    if done == 1:
        old, new = smallest_edit(task)
        return format_tool_call("edit_file", {"path": data["file"], "old": old, "new": new})
    return "The bug is fixed."


def make_env(sandbox: SandboxConfig | None = None, **kwargs: Any) -> RepoEnv:
    """The ``repo`` environment; ``sandbox`` sets the limits of each command and test run."""
    return RepoEnv(sandbox, **kwargs)
