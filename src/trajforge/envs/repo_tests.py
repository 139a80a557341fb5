"""A Python repository's tests as bug-injection tasks see them: which of its files are tests
(hidden from the agent, restored before the verdict), the pytest command line that both the
synthesis (on the host) and the ``repo`` env (in the sandbox) run, and the failing test ids in
what it printed."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from trajforge.envs.bwrap import python_executable
from trajforge.envs.sandbox import Mount, SandboxConfig, SandboxResult, run_command
from trajforge.errors import ConfigError

WORKDIR = "/repo"
SITE = "/opt/trajforge-pytest"
"""Where the folder holding this interpreter's pytest is seen in the sandbox."""
TEST_DIRS = frozenset({"tests", "test", "testing"})
_SKIPPED_DIRS = frozenset({"__pycache__", ".git", ".hg", ".tox", ".nox", ".venv", "venv", "build",
                           "dist", ".eggs", ".pytest_cache", ".mypy_cache", "docs"})  # fmt: skip
_BUILD_SCRIPTS = frozenset({"setup.py", "noxfile.py", "fabfile.py"})
PYTEST_ARGS = ("-m", "pytest", "-q", "-rfE", "--tb=line", "-p", "no:cacheprovider")
TEST_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
"""Stale bytecode would hide a change made within the same second; plugins installed beside
trajforge are no part of the package's tests."""
PASSED, FAILED, NO_TESTS = 0, 1, 5
"""pytest's exit codes: all passed; some failed; none collected."""
_SUMMARY = re.compile(r"^(?:FAILED|ERROR) (.+?)(?: - (.*))?$")


def is_test_file(path: PurePosixPath) -> bool:
    """A file pytest collects or configures with: ``test_*.py``, ``*_test.py``, ``conftest.py``,
    or any file under a ``tests``/``test``/``testing`` folder."""
    name = path.name
    named = name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))
    return named or name == "conftest.py" or any(p in TEST_DIRS for p in path.parts[:-1])


def repo_files(root: Path) -> list[PurePosixPath]:
    """Every file of the repository, relative and sorted, without caches, builds and docs."""
    found: list[PurePosixPath] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not d.endswith(".egg-info"))
        base = PurePosixPath(Path(folder).relative_to(root).as_posix())
        found += [base / f for f in files if not f.endswith((".pyc", ".pyo"))]
    return sorted(found)


def find_tests(root: Path) -> list[str]:
    """The repository's test files (``is_test_file``), relative."""
    return [str(p) for p in repo_files(root) if is_test_file(p)]


def find_sources(root: Path) -> list[str]:
    """The repository's Python files that are neither tests nor build scripts, relative."""
    return [str(p) for p in repo_files(root)
            if p.suffix == ".py" and not is_test_file(p) and p.name not in _BUILD_SCRIPTS]  # fmt: skip


def copy_repo(root: Path, dest: Path, *, tests: bool) -> None:
    """Copy ``root``'s files to ``dest``: all of them, or (``tests=False``) all but the tests."""
    for rel in repo_files(root):
        if tests or not is_test_file(rel):
            copy_file(root / rel, dest / rel)


def copy_file(source: Path, dest: Path) -> None:
    """``source`` to ``dest``, replacing whatever is there (a link the agent made included)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.is_dir():
        shutil.rmtree(dest)
    shutil.copy2(source, dest)


def import_roots(root: Path) -> list[str]:
    """Folders, relative to the repository, that its tests import the package from."""
    return ["src"] if (root / "src").is_dir() else []


def pytest_argv(python: str, tests: Sequence[str]) -> list[str]:
    """The command that runs ``tests`` (files or test ids) from the repository's root."""
    return [python, *PYTEST_ARGS, *tests]


def failures(output: str) -> dict[str, str]:
    """The tests pytest's short summary names as failed or in error, each with its message."""
    found: dict[str, str] = {}
    for line in output.splitlines():
        if match := _SUMMARY.match(line.strip()):
            found[match.group(1)] = (match.group(2) or "").strip()
    return found


@dataclass(frozen=True)
class RepoTestRun:
    """How one run of the package's tests ended."""

    exit_code: int | None
    """None: it ran out of time."""
    failed: dict[str, str]
    output: str
    duration_s: float

    @property
    def passed(self) -> bool:
        return self.exit_code == PASSED

    @property
    def collected_none(self) -> bool:
        return self.exit_code == NO_TESTS


def pytest_site() -> Path:
    """The folder this interpreter imports pytest from (seen read-only in the sandbox).

    Raises:
        ConfigError: pytest is not installed.
    """
    found = importlib.util.find_spec("pytest")
    if found is None or found.origin is None:
        raise ConfigError("the repository's tests run with pytest: pip install pytest")
    return Path(found.origin).resolve().parents[1]


async def run_in_repo(
    repo: Path, script: str, config: SandboxConfig, uid: int | None = None
) -> SandboxResult:
    """``script`` run by bash in the sandbox, with ``repo`` at /repo (writable, the working
    directory) and this interpreter and its pytest on the path, as ``uid`` where the host is
    root (``episode_uid``)."""
    paths = [f"{WORKDIR}/{r}" for r in import_roots(repo)] + [SITE]
    env = {**TEST_ENV, "PYTHONPATH": ":".join(paths),
           "PATH": f"{python_executable().parent}:/usr/local/bin:/usr/bin:/bin"}  # fmt: skip
    mounts = (Mount(repo, WORKDIR, True), Mount(pytest_site(), SITE))
    return await run_command(["/bin/bash", "-c", script], config, mounts=mounts, cwd=WORKDIR,
                             env=env, uid=uid)  # fmt: skip


def run_sandboxed_tests(repo: Path, tests: list[str], timeout_s: float) -> RepoTestRun:
    """``run_repo_tests`` in the sandbox, for code nobody vouches for (a policy wrote it); the
    files need only be readable."""
    config = SandboxConfig(timeout_s=timeout_s, cpu_s=max(1, int(timeout_s)), memory_mb=2048,
                           max_processes=64, tmp_size_mb=256, max_output_bytes=4 << 20)  # fmt: skip
    argv = shlex.join(pytest_argv(str(python_executable()), tests))
    result = asyncio.run(run_in_repo(repo, argv, config))
    output = result.stdout + result.stderr
    code = None if result.timed_out else result.exit_code
    return RepoTestRun(code, failures(output), output, result.duration_s)


def run_repo_tests(repo: Path, tests: list[str], timeout_s: float) -> RepoTestRun:
    """Run ``tests`` of the repository copy at ``repo`` with this interpreter's pytest, in a
    subprocess on the host (no sandbox: for the code of a package the user chose)."""
    roots = [str(repo / r) for r in import_roots(repo)]
    env = {**os.environ, **TEST_ENV, "PYTHONPATH": os.pathsep.join(roots)}
    started = time.monotonic()
    try:
        done = subprocess.run(pytest_argv(sys.executable, tests), cwd=repo, env=env,
                              capture_output=True, text=True, timeout=timeout_s)  # fmt: skip
    except subprocess.TimeoutExpired:
        return RepoTestRun(None, {}, "", time.monotonic() - started)
    output = done.stdout + done.stderr
    return RepoTestRun(done.returncode, failures(output), output, time.monotonic() - started)
