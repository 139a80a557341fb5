"""Repository tasks by bug injection (SWE-smith): change one function of a Python package at a
time by a rule, keep the change as a task of the ``repo`` env only when the package's tests all
pass before it and some fail after it (those become the task's hidden tests).

1. The package's tests run once on a copy of it (pytest in a subprocess, with a timeout): any
   failure refuses the package.
2. The rules' changes (``synthesis.mutations``) are drawn round-robin over the functions, in an
   order set by ``seed``, until ``count`` were tried; or a policy rewrites ``count`` functions
   with a bug, one after another (``synthesis.bug_policy``).
3. Each change is written into the copy, the tests run, the file is put back. Kept: some tests
   failed; dropped, by reason: none failed, the run timed out, the tests did not run.
4. Tasks with the same change are kept once (their id is a hash of it).
"""

from __future__ import annotations

import itertools
import random
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from trajforge.envs import (
    REPO_ENV,
    RepoTestRun,
    content_id,
    copy_repo,
    find_sources,
    find_tests,
    run_repo_tests,
    run_sandboxed_tests,
)
from trajforge.errors import ConfigError
from trajforge.policy import Policy
from trajforge.schema import Task
from trajforge.synthesis.bug_policy import RULE as POLICY_RULE
from trajforge.synthesis.bug_policy import policy_changes
from trajforge.synthesis.mutations import Mutation, functions, mutations
from trajforge.synthesis.report import SynthesisReport

MIN_TIMEOUT_S = 10.0
TIMEOUT_FACTOR = 10.0
"""A changed package's tests may take this many times the unchanged run (an injected endless
loop is cut there), and never less than ``MIN_TIMEOUT_S``."""
MAX_LISTED = 5
UNCAUGHT = "no test fails after the change"
TIMED_OUT = "the tests time out after the change"
NOT_RUN = "the tests do not run after the change"
NOT_UNIQUE = "the changed function's text is not unique in its file"
BASELINE_TIMEOUT_S = 300.0


def check_package(package: Path, key: str = "--bugs") -> tuple[list[str], list[str]]:
    """The package's source and test files.

    Raises:
        ConfigError: it is no folder, or has no Python source or no tests (named as ``key``).
    """
    if not package.is_dir():
        raise ConfigError(f"{key} {package}: no such folder")
    sources, tests = find_sources(package), find_tests(package)
    if not tests:
        raise ConfigError(f"{key} {package}: no tests (test_*.py, *_test.py or a tests/ folder)")
    if not sources:
        raise ConfigError(f"{key} {package}: no Python source besides its tests")
    return sources, tests


def _drawn(package: Path, sources: list[str], seed: int) -> Iterator[Mutation]:
    """The rules' changes, one function after another (round-robin, shuffled by ``seed``)."""
    by_function: dict[tuple[str, str], list[Mutation]] = defaultdict(list)
    for file in sources:
        text = (package / file).read_text(encoding="utf-8")
        for found in mutations(file, text):
            by_function[found.file, found.function].append(found)
    rng = random.Random(f"bugs:{seed}")
    queues = [by_function[key] for key in sorted(by_function)]
    rng.shuffle(queues)
    for queue in queues:
        rng.shuffle(queue)
    while queues:
        yield from (queue.pop() for queue in queues)
        queues = [queue for queue in queues if queue]


def _prompt(package: str, failed: dict[str, str]) -> str:
    shown = sorted(failed)[:MAX_LISTED]
    listed = "\n".join(f"- {t}" + (f": {failed[t]}" if failed[t] else "") for t in shown)
    more = f"\n(and {len(failed) - len(shown)} more)" if len(failed) > len(shown) else ""
    return (
        f"The repository of the Python package {package} has a bug: these of its tests fail "
        f"now.\n{listed}{more}\nFind the bug in the package's source and fix it, so that all "
        "of its tests pass. The tests themselves are not in your copy."
    )


def task_of(
    package: Path, tests: list[str], change: Mutation, failed: dict[str, str], seed: int
) -> Task:
    """The ``repo`` task of ``change``, its hidden tests those that ``failed``."""
    data = {"repo": str(package.resolve()), "file": change.file, "function": change.function,
            "rule": change.rule, "lines": list(change.lines), "original": change.original,
            "buggy": change.buggy, "hidden_tests": sorted(failed), "test_files": tests,
            "synthesis": {"source": "bugs", "seed": seed}}  # fmt: skip
    draft = Task(id="draft", prompt=_prompt(package.resolve().name, failed), env=REPO_ENV,
                 split="train", data=data)  # fmt: skip
    return draft.model_copy(update={"id": content_id(REPO_ENV, draft)})


def _verdict(run: RepoTestRun) -> str | None:
    """None when the run caught the change, else why it did not."""
    if run.exit_code is None:
        return TIMED_OUT
    if run.passed:
        return UNCAUGHT
    if not run.failed:
        return NOT_RUN
    return None


def _try(
    change: Mutation, package: Path, copy: Path, tests: list[str], timeout_s: float
) -> dict[str, str] | str:
    """The tests that fail with ``change`` made in ``copy`` (put back after), or why it is no
    task. A policy's change runs in the sandbox: model-written code never runs on the host."""
    original = (package / change.file).read_text(encoding="utf-8")
    changed = change.apply(original)
    if changed.count(change.buggy) != 1:
        return NOT_UNIQUE  # the expert's edit, and an agent's, must find the function
    (copy / change.file).write_text(changed, encoding="utf-8")
    try:
        run = (run_sandboxed_tests if change.rule == POLICY_RULE else run_repo_tests)(
            copy, tests, timeout_s
        )
    finally:
        (copy / change.file).write_text(original, encoding="utf-8")
    return _verdict(run) or run.failed


def _why_not_passed(run: RepoTestRun) -> str:
    if run.failed:
        return f"{len(run.failed)} fail, the first {sorted(run.failed)[0]}"
    if run.exit_code is None:
        return f"they did not finish in {BASELINE_TIMEOUT_S:.0f} s"
    if run.collected_none:
        return "pytest collected no tests"
    tail = run.output.strip().splitlines()[-1:] or ["no output"]
    return f"pytest exited with code {run.exit_code}: {tail[0]}"


def _written(
    policy: Policy, package: Path, sources: list[str], count: int, seed: int
) -> Iterator[Mutation | str]:
    texts = {file: (package / file).read_text(encoding="utf-8") for file in sources}
    spans = [span for file in sources for span in functions(file, texts[file])]
    yield from policy_changes(policy, spans, texts, count, seed)


def synthesize_bugs(
    package: Path, count: int, *, seed: int, policy: Policy | None = None
) -> SynthesisReport:
    """Up to ``count`` changes to ``package`` tried, made by the rules or (``policy``) written
    by a policy; those its tests catch as the report's tasks, the others counted by reason.

    Raises:
        ConfigError: the package is not a folder with source and tests, or its tests do not
            all pass before any change (one line naming the first that fails).
    """
    sources, tests = check_package(package)
    report = SynthesisReport(env=REPO_ENV, run_id="", source="changes tried")
    work = Path(tempfile.mkdtemp(prefix="trajforge-bugs-"))
    try:
        copy = work / "repo"
        copy_repo(package, copy, tests=True)
        before = run_repo_tests(copy, tests, BASELINE_TIMEOUT_S)
        if not before.passed:
            raise ConfigError(f"{package}: its tests must all pass before any change "
                              f"({_why_not_passed(before)})")  # fmt: skip
        timeout_s = max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * before.duration_s)
        kept: dict[str, Task] = {}
        changes = (_drawn(package, sources, seed) if policy is None
                   else _written(policy, package, sources, count, seed))  # fmt: skip
        for change in itertools.islice(changes, count):
            report.explored += 1
            if isinstance(change, str):  # a policy's answer that is no change: why
                report.dropped[change] += 1
                continue
            caught = _try(change, package, copy, tests, timeout_s)
            if isinstance(caught, str):
                report.dropped[caught] += 1
                continue
            task = task_of(package, tests, change, caught, seed)
            if task.id in kept:
                report.dropped["a duplicate"] += 1
            else:
                kept[task.id] = task
        report.tasks = list(kept.values())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report
