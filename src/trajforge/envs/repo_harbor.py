"""Bug-injection tasks written as Harbor task folders (``trajforge.envs.harbor`` reads them back,
``--env harbor:DIR``), one folder per task, named by its id:

- ``instruction.md``: the task's prompt;
- ``environment/Dockerfile`` and ``environment/repo/``: a Python image with the pytest the task
  was checked with, and the buggy repository without its tests, copied to ``/app``;
- ``tests/test.sh`` and ``tests/repo/``: the hidden tests, put back into ``/app`` and run; the
  reward is 1 when they all pass;
- ``solution/solve.sh``: the changed file written back as it was.
"""

from __future__ import annotations

import importlib.metadata
import json
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from trajforge.envs.builtin.repo import buggy_text
from trajforge.envs.repo_tests import (
    PYTEST_ARGS,
    TEST_ENV,
    copy_file,
    copy_repo,
    import_roots,
)
from trajforge.errors import ConfigError
from trajforge.schema import Task

WORKDIR = "/app"
VERIFIER_TIMEOUT_S = 600.0
AGENT_TIMEOUT_S = 1800.0
MEMORY_MB = 2048
_EOF = "TRAJFORGE_ORIGINAL"


def _toml(task: Task) -> str:
    data = task.data
    meta = {"source": "trajforge synthesize --bugs", "file": data["file"],
            "function": data["function"], "rule": data["rule"]}  # fmt: skip
    lines = ['version = "1.0"', f"split = {json.dumps(task.split or 'train')}", "", "[metadata]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in meta.items()]
    lines += ["", "[verifier]", f"timeout_sec = {VERIFIER_TIMEOUT_S}", "", "[agent]",
              f"timeout_sec = {AGENT_TIMEOUT_S}", "", "[environment]",
              f"memory_mb = {MEMORY_MB}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _dockerfile(repo: Path) -> str:
    version = sys.version_info
    env = {**TEST_ENV, **{"PYTHONPATH": ":".join(f"{WORKDIR}/{r}" for r in import_roots(repo))}}
    variables = " ".join(f"{k}={v}" for k, v in env.items() if v)
    return (
        f"FROM python:{version.major}.{version.minor}-slim\n"
        f"RUN pip install --no-cache-dir pytest=={importlib.metadata.version('pytest')}\n"
        f"ENV {variables}\n"
        f"WORKDIR {WORKDIR}\n"
        "COPY repo/ .\n"
    )


def _test_sh(tests: list[str]) -> str:
    command = shlex.join(["python3", *PYTEST_ARGS, *tests])
    return (
        "#!/bin/bash\n"
        "# The package's own tests, hidden from the agent: put back, then all run.\n"
        f"cp -r --remove-destination /tests/repo/. {WORKDIR}/\n"
        f"cd {WORKDIR}\n"
        f"if {command}; then reward=1; else reward=0; fi\n"
        "echo $reward > /logs/verifier/reward.txt\n"
    )


def _solve_sh(file: str, text: str) -> str:
    body = text if text.endswith("\n") else text + "\n"
    if _EOF in body.splitlines():
        raise ConfigError(f"{file}: holds the line {_EOF}, which its solve.sh needs")
    return f"#!/bin/bash\ncat > {shlex.quote(file)} <<'{_EOF}'\n{body}{_EOF}\n"


def write_task(task: Task, folder: Path) -> None:
    """One ``repo`` task as a Harbor task folder at ``folder``."""
    data = task.data
    source = Path(data["repo"])
    (folder / "environment").mkdir(parents=True)
    repo = folder / "environment" / "repo"
    copy_repo(source, repo, tests=False)
    (repo / data["file"]).write_text(buggy_text(task), encoding="utf-8")
    for rel in data["test_files"]:
        copy_file(source / rel, folder / "tests" / "repo" / rel)
    (folder / "solution").mkdir()
    original = (source / data["file"]).read_text(encoding="utf-8")
    files = {"task.toml": _toml(task), "instruction.md": task.prompt + "\n",
             "environment/Dockerfile": _dockerfile(source),
             "tests/test.sh": _test_sh(data["test_files"]),
             "solution/solve.sh": _solve_sh(data["file"], original)}  # fmt: skip
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    for script in ("tests/test.sh", "solution/solve.sh"):
        (folder / script).chmod(0o755)


def write_harbor_tasks(tasks: list[Task], out: Path) -> None:
    """``tasks`` as Harbor task folders under ``out`` (a new folder), which appears only once
    all are written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for task in tasks:
            write_task(task, staging / task.id)
        staging.chmod(0o755)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
