"""``TaskSet``: an ordered collection of tasks with unique ids, from JSONL or a seeded generator.

Splits are deterministic and never overlap: a task is in exactly one split, decided by its id
(or, for generated tasks, by a hash of its content, so that no seed can put the same problem in
both train and test).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from pydantic import ValidationError

from trajforge.configfile import first_problem
from trajforge.errors import DataError
from trajforge.formats import read_json_objects
from trajforge.schema import Task

TRAIN = "train"
TEST = "test"


def _unit_hash(*parts: object) -> float:
    """A deterministic number in [0, 1) from ``parts`` (stable across processes and platforms)."""
    digest = hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def content_split(content_key: str, test_fraction: float = 0.1) -> str:
    """The split a generated problem belongs to, from its content alone (``train`` or ``test``)."""
    return TEST if _unit_hash("split", content_key) < test_fraction else TRAIN


class TaskSet:
    """Tasks in a fixed order, ids unique.

    Args:
        tasks: The tasks, in the order they will be iterated.
        name: Where the tasks came from (used in error messages).
    """

    def __init__(self, tasks: Iterable[Task], name: str = "tasks") -> None:
        self.name = name
        self._tasks: list[Task] = []
        seen: set[str] = set()
        for task in tasks:
            if task.id in seen:
                raise DataError(f"{name}: duplicate task id {task.id!r}")
            seen.add(task.id)
            self._tasks.append(task)

    @classmethod
    def from_jsonl(cls, path: str | Path, env: str | None = None) -> TaskSet:
        """Read one task per line; an error names ``file:line`` and the bad field.

        Args:
            path: A JSONL file; blank lines are skipped.
            env: Sets ``task.env`` on tasks that do not name one.
        """
        path = Path(path)
        tasks: list[Task] = []
        seen: dict[str, int] = {}
        for lineno, record in read_json_objects(path, "task"):
            where = f"{path}:{lineno}"
            try:
                task = Task.model_validate(record)
            except ValidationError as exc:
                field, msg = first_problem(exc, "task")
                raise DataError(f"{where}: field {field!r}: {msg}") from None
            if task.id in seen:
                raise DataError(
                    f"{where}: field 'id': duplicate task id {task.id!r} (first on line {seen[task.id]})"
                )
            seen[task.id] = lineno
            if env is not None and task.env is None:
                task = task.model_copy(update={"env": env})
            tasks.append(task)
        return cls(tasks, name=str(path))

    @classmethod
    def from_generator(
        cls, generate: Callable[[int, int], Iterable[Task]], n: int, seed: int = 0
    ) -> TaskSet:
        """``generate(n, seed)`` -> tasks; the same ``(n, seed)`` must give the same tasks."""
        return cls(generate(n, seed), name=getattr(generate, "__qualname__", "generator"))

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks)

    def __getitem__(self, index: int) -> Task:
        return self._tasks[index]

    @property
    def ids(self) -> list[str]:
        return [t.id for t in self._tasks]

    def take(self, n: int) -> TaskSet:
        """The first ``n`` tasks (all of them when there are fewer)."""
        if n < 0:
            raise ValueError(f"take: n must be >= 0, got {n}")
        return TaskSet(self._tasks[:n], name=self.name)

    def shuffled(self, seed: int) -> TaskSet:
        """The same tasks in an order fixed by ``seed``."""
        order = sorted(self._tasks, key=lambda t: _unit_hash("order", seed, t.id))
        return TaskSet(order, name=self.name)

    def split(self, test_fraction: float = 0.1, seed: int = 0) -> tuple[TaskSet, TaskSet]:
        """Split into (train, test) by task id: deterministic, disjoint, order kept.

        The test set holds ``round(len * test_fraction)`` tasks, those whose ids hash lowest
        under ``seed``; each task gets ``split`` set to ``train`` or ``test``.
        """
        if not 0.0 <= test_fraction <= 1.0:
            raise ValueError(f"split: test_fraction must be in [0, 1], got {test_fraction}")
        n_test = round(len(self._tasks) * test_fraction)
        ranked = sorted(self._tasks, key=lambda t: _unit_hash("split", seed, t.id))
        test_ids = {t.id for t in ranked[:n_test]}
        train = [t.model_copy(update={"split": TRAIN}) for t in self._tasks if t.id not in test_ids]
        test = [t.model_copy(update={"split": TEST}) for t in self._tasks if t.id in test_ids]
        return TaskSet(train, name=f"{self.name}[train]"), TaskSet(test, name=f"{self.name}[test]")

    def to_jsonl(self, path: str | Path) -> None:
        Path(path).write_text(
            "".join(t.model_dump_json(exclude_defaults=True) + "\n" for t in self._tasks),
            encoding="utf-8",
        )


def generate_unique(
    env: str,
    make_one: Callable[[random.Random], Task],
    n: int,
    seed: int,
    split: str = TRAIN,
    test_fraction: float = 0.1,
) -> list[Task]:
    """``n`` distinct generated tasks of one split, deterministic in ``(n, seed, split)``.

    ``make_one(rng)`` draws one task (its id is replaced). The task id is a hash of its content,
    and its split is decided by that content too, so train and test never share a problem.
    A draw that lands in the other split, or repeats an earlier task, is skipped.
    """
    if split not in (TRAIN, TEST):
        raise ValueError(f"split: must be {TRAIN!r} or {TEST!r}, got {split!r}")
    rng = random.Random(f"{env}:{seed}:{split}")
    tasks: list[Task] = []
    seen: set[str] = set()
    attempts = 0
    max_attempts = 200 * n + 1000
    while len(tasks) < n:
        attempts += 1
        if attempts > max_attempts:
            raise DataError(
                f"{env}: could only generate {len(tasks)} distinct {split} tasks of the {n} asked for"
            )
        draft = make_one(rng)
        key = json.dumps([draft.prompt, draft.answer, draft.data], sort_keys=True, default=str)
        if content_split(key, test_fraction) != split:
            continue
        task_id = f"{env}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
        if task_id in seen:
            continue
        seen.add(task_id)
        tasks.append(draft.model_copy(update={"id": task_id, "env": env, "split": split}))
    return tasks
