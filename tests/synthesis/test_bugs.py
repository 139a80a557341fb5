"""Repository tasks by bug injection (SWE-smith): the rules change one place of one function and
nothing else; a change the package's tests catch is kept with the failing test ids as its hidden
tests, one no test catches is not kept; a package failing its own tests is refused; the repo
env rewards an agent whose edit restores the function; the Harbor folders play the same."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from episodes import play, rewards
from trajforge.envs import get_env, sandbox
from trajforge.envs.builtin.repo import buggy_text, smallest_edit
from trajforge.envs.repo_harbor import write_harbor_tasks
from trajforge.errors import ConfigError
from trajforge.formats import format_tool_call
from trajforge.policy import load_policy
from trajforge.schema import Message, Role, Task
from trajforge.synthesis.bug_policy import NO_CODE, OTHER_FUNCTION
from trajforge.synthesis.bugs import UNCAUGHT, synthesize_bugs
from trajforge.synthesis.mutations import mutations

SOURCE = '''"""Bounds."""


def clamp(x, low):
    """At least low."""
    if x < low:
        return low
    return x
'''
TESTS = """from bounds import clamp


def test_below():
    assert clamp(-3, 0) == 0


def test_above():
    assert clamp(4, 0) == 4
"""

needs_sandbox = pytest.mark.skipif(
    not sandbox.sandbox_available(), reason="bubblewrap cannot run here (apt install bubblewrap)"
)


def _package(root: Path, tests: str = TESTS) -> Path:
    (root / "bounds").mkdir(parents=True)
    (root / "bounds" / "__init__.py").write_text(SOURCE)
    (root / "tests").mkdir()
    (root / "tests" / "test_bounds.py").write_text(tests)
    return root


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Task], dict[str, int]]:
    """The package and what synthesis made of it: its three changes all tried."""
    package = _package(tmp_path_factory.mktemp("pkg") / "bounds-1.0")
    report = synthesize_bugs(package, 10, seed=0)
    assert report.explored == 3
    return package, report.tasks, dict(report.dropped)


def test_each_rule_changes_one_place_of_one_function() -> None:
    found = {(m.rule, m.buggy.splitlines()[2].strip()) for m in mutations("b.py", SOURCE)}
    assert found == {
        ("flip-comparison", "if x <= low:"),
        ("negate-condition", "if not x < low:"),
        ("drop-if", "pass"),
    }
    text = "def f(xs):\n    return [x + 1 for x in range(len(xs)) if x and xs]\n"
    changed: dict[str, set[str]] = {}
    for m in mutations("f.py", text):
        changed.setdefault(m.rule, set()).add(m.apply(text).splitlines()[1].strip())
    assert changed == {
        "swap-operator": {"return [x - 1 for x in range(len(xs)) if x and xs]"},
        "off-by-one": {"return [x + 2 for x in range(len(xs)) if x and xs]"},
        "off-by-one-range": {"return [x + 1 for x in range(len(xs) - 1) if x and xs]"},
        "drop-clause": {
            "return [x + 1 for x in range(len(xs)) if xs]",
            "return [x + 1 for x in range(len(xs)) if x]",
        },
    }
    for change in mutations("b.py", SOURCE):
        kept = change.apply(SOURCE).splitlines()
        assert kept[:3] == SOURCE.splitlines()[:3] and change.function == "clamp"


def test_a_caught_change_is_kept_with_its_failing_tests_and_an_uncaught_one_is_not(
    made: tuple[Path, list[Task], dict[str, int]],
) -> None:
    _, tasks, dropped = made
    # x <= low returns low == x at the boundary: no test can tell, so it is no task
    assert dropped == {UNCAUGHT: 1}
    by_rule = {t.data["rule"]: t for t in tasks}
    assert set(by_rule) == {"negate-condition", "drop-if"}
    assert by_rule["drop-if"].data["hidden_tests"] == ["tests/test_bounds.py::test_below"]
    assert by_rule["negate-condition"].data["hidden_tests"] == [
        "tests/test_bounds.py::test_above",
        "tests/test_bounds.py::test_below",
    ]
    task = by_rule["drop-if"]
    assert task.env == "repo" and "tests/test_bounds.py::test_below: assert -3 == 0" in task.prompt
    assert buggy_text(task) == SOURCE.replace("    if x < low:\n        return low\n", "    pass\n")


def test_a_package_whose_tests_fail_before_any_change_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    package = _package(
        tmp_path / "p", TESTS + "\n\ndef test_wrong():\n    assert clamp(1, 2) == 1\n"
    )
    with pytest.raises(ConfigError) as caught:
        synthesize_bugs(package, 5, seed=0)
    assert str(caught.value) == (
        f"{package}: its tests must all pass before any change "
        "(1 fail, the first tests/test_bounds.py::test_wrong)"
    )


@needs_sandbox
def test_bugs_written_by_a_policy_are_kept_when_caught_and_counted_when_not_code(
    tmp_path: Path,
) -> None:
    package = _package(tmp_path / "p")
    answers = iter([
        "Here:\n```python\ndef clamp(x, low):\n    if x > low:\n        return low\n"
        "    return x\n```",
        "```python\ndef other(x):\n    return x\n```",
        "I would rather not.",
    ])  # fmt: skip
    writer = load_policy("expert", expert=lambda task, messages: next(answers), name="writer")
    report = synthesize_bugs(package, 3, seed=0, policy=writer)
    assert dict(report.dropped) == {OTHER_FUNCTION: 1, NO_CODE: 1}
    [task] = report.tasks
    assert task.data["rule"] == "policy" and task.data["buggy"] == (
        "def clamp(x, low):\n    if x > low:\n        return low\n    return x\n"
    )
    assert task.data["hidden_tests"] == [
        "tests/test_bounds.py::test_above",
        "tests/test_bounds.py::test_below",
    ]


@needs_sandbox
def test_the_env_rewards_an_edit_that_restores_the_function_and_nothing_else(
    made: tuple[Path, list[Task], dict[str, int]],
) -> None:
    _, tasks, _ = made
    entry = get_env("repo")
    assert rewards(entry.make, tasks, entry.expert) == [1.0] * len(tasks)
    # the expert reads the function, then changes back only the lines that differ
    [task] = [t for t in tasks if t.data["rule"] == "drop-if"]
    shown = play(entry.make, task, entry.expert)
    [read, edit] = [c for m in shown.messages for c in m.tool_calls]
    assert read.name == "bash" and "def clamp(" in read.arguments["command"]
    assert edit.arguments["old"] == "    pass\n"
    assert edit.arguments["new"] == "    if x < low:\n        return low\n"

    def wrong_fix(task: Task, messages: list[Message]) -> str:
        if any(m.role is Role.TOOL for m in messages):
            return "Fixed."
        arguments = {"path": "/repo/bounds/__init__.py", "old": "return x", "new": "return -x"}
        return format_tool_call("edit_file", arguments)

    assert rewards(entry.make, [task], wrong_fix) == [0.0]
    # the agent cannot see (or change) the tests; the listing is its copy of the repository
    looked = play(entry.make, task, _ls_then_stop)
    listing = next(m.text for m in looked.messages if m.role is Role.TOOL)
    assert listing.split() == ["./bounds/__init__.py"] and looked.outcome.reward == 0.0


@needs_sandbox
def test_a_link_out_of_the_repository_is_not_followed_by_the_env(
    made: tuple[Path, list[Task], dict[str, int]], tmp_path: Path
) -> None:
    _, tasks, _ = made
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.py").write_text("x = 1\n")
    steps = [
        format_tool_call("bash", {"command": f"ln -s {outside} tests && ln -s {outside} out"}),
        format_tool_call("edit_file", {"path": "out/x.py", "old": "x = 1", "new": "x = 2"}),
        "Done.",
    ]

    def reply(task: Task, messages: list[Message]) -> str:
        return steps[sum(m.role is Role.ASSISTANT for m in messages)]

    entry = get_env("repo")
    played = play(entry.make, tasks[0], reply)
    said = [m.text for m in played.messages if m.role is Role.TOOL]
    assert "out/x.py: only files under /repo can be edited" in said[1]
    # the hidden tests were put back in the workspace, not through the link
    assert [p.name for p in outside.iterdir()] == ["x.py"] and played.outcome.reward == 0.0
    assert (outside / "x.py").read_text() == "x = 1\n"


def _ls_then_stop(task: Task, messages: list[Message]) -> str:
    if any(m.role is Role.TOOL for m in messages):
        return "Done."
    return format_tool_call("bash", {"command": "find . -type f | sort"})


@needs_sandbox
@pytest.mark.skipif(
    shutil.which("python3", path=sandbox.SANDBOX_PATH) is None
    or subprocess.run(
        ["python3", "-c", "import pytest"], capture_output=True, env={"PATH": sandbox.SANDBOX_PATH}
    ).returncode
    != 0,
    reason="the Harbor tests run python3 -m pytest (apt install python3-pytest)",
)
def test_harbor_folders_round_trip(
    made: tuple[Path, list[Task], dict[str, int]], tmp_path: Path
) -> None:
    _, tasks, _ = made
    out = tmp_path / "harbor"
    write_harbor_tasks(tasks, out)
    entry = get_env(f"harbor:{out}")
    read = sorted(entry.tasks(10), key=lambda t: t.id)
    assert [(t.id, t.prompt) for t in read] == sorted((t.id, t.prompt) for t in tasks)
    assert rewards(entry.make, read, entry.expert) == [1.0, 1.0]
    assert rewards(entry.make, read, lambda task, messages: "I give up.") == [0.0, 0.0]


def test_the_repo_env_has_no_tasks_of_its_own() -> None:
    with pytest.raises(ConfigError, match="trajforge synthesize --bugs PACKAGE_DIR"):
        get_env("repo").tasks(1)


def test_the_experts_edit_widens_until_its_old_text_occurs_once(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def a(x):\n    return x - 1\n\n\ndef b(x):\n    return x + 1\n")
    data = {"repo": str(tmp_path), "file": "m.py", "lines": [4, 6],
            "original": "def b(x):\n    return x + 1\n", "buggy": "def b(x):\n    return x - 1\n"}  # fmt: skip
    task = Task(id="t", prompt="fix b", env="repo", data=data)
    assert smallest_edit(task) == (data["buggy"], data["original"])
