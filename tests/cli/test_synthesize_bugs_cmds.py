"""``trajforge synthesize --bugs``: a package's caught bugs written as a task file (played by
``--env FILE``) and as Harbor folders; bad input refused in one line, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_runner import RunCli
from trajforge.envs import TaskSet

SOURCE = "def inc(x):\n    return x + 1\n"
TESTS = "from inc import inc\n\n\ndef test_inc():\n    assert inc(1) == 2\n"


def _package(root: Path, tests: str = TESTS) -> Path:
    root.mkdir()
    (root / "inc.py").write_text(SOURCE)
    (root / "test_inc.py").write_text(tests)
    return root


def test_bugs_are_written_as_a_task_file_and_harbor_folders(
    run_cli: RunCli, tmp_path: Path
) -> None:
    package = _package(tmp_path / "inc")
    out, harbor = tmp_path / "out" / "tasks.jsonl", tmp_path / "out" / "harbor"
    code, stdout, err = run_cli(
        "synthesize", "--bugs", package, "--out", out, "--harbor", harbor, "--episodes", "1"
    )
    assert code == 0, err
    [task] = TaskSet.from_jsonl(out)
    assert task.env == "repo" and task.data["hidden_tests"] == ["test_inc.py::test_inc"]
    assert "1 tasks from 1 changes tried" in stdout
    assert sorted(p.name for p in harbor.iterdir()) == [task.id]
    assert (harbor / task.id / "environment" / "repo" / "inc.py").read_text() != SOURCE


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "give --env ENV, or --bugs PACKAGE_DIR for repository tasks"),
        (["--env", "repo"], "env 'repo': its tasks are made by bug injection into a package"),
        (["--bugs", "{tmp}/nope"], "--bugs {tmp}/nope: no such folder"),
        (["--bugs", "{tmp}/empty"], "--bugs {tmp}/empty: no tests (test_*.py"),
        (["--bugs", "{tmp}/inc", "--env", "calculator"], "are tasks of env 'repo', not 'calc"),
        (["--env", "calculator", "--harbor", "{tmp}/h"], "--harbor: Harbor task folders are"),
        (["--bugs", "{tmp}/inc", "--harbor", "{tmp}"], "--harbor {tmp}: it exists"),
        (["--bugs", "{tmp}/failing"], "its tests must all pass before any change (1 fail, the"),
        (["--env", "calculator", "--bug-policy", "tiny"], "--bug-policy: it writes the bugs of"),
        (["--bugs", "{tmp}/inc", "--bug-policy", "nope"], "--bug-policy: unknown policy"),
    ],
)
def test_bad_input_fails_in_one_line_and_writes_nothing(
    run_cli: RunCli, tmp_path: Path, args: list[str], says: str
) -> None:
    _package(tmp_path / "inc")
    _package(tmp_path / "failing", TESTS.replace("== 2", "== 3"))
    (tmp_path / "empty").mkdir()
    before = sorted(tmp_path.rglob("*"))
    out = tmp_path / "tasks.jsonl"
    filled = [a.format(tmp=tmp_path) for a in args]
    code, _, err = run_cli("synthesize", *filled, "--out", out, "--store", tmp_path / "s.db")
    assert code == 1
    assert err.strip().count("\n") == 0 and says.format(tmp=tmp_path) in err, err
    assert sorted(tmp_path.rglob("*")) == before
