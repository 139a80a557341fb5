"""A Python repository's tests as bug-injection tasks see them: which of its files are tests
(hidden from the agent, restored before the verdict), the pytest command line that both the
synthesis (on the host) and the ``repo`` env (in the sandbox) run, and the failing test ids in
what it printed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

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


def run_repo_tests(repo: Path, tests: list[str], timeout_s: float) -> RepoTestRun:
    """Run ``tests`` of the repository copy at ``repo`` with this interpreter's pytest, in a
    subprocess (the host's, no sandbox: for a package the user chose)."""
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
