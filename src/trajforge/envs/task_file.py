"""A task file as an environment: ``--env tasks.jsonl`` plays the file's tasks in the env they
name (``task.env``, one env for the whole file), with that env's verifier, expert and simulated
user. What ``trajforge synthesize`` writes is read this way by every command and stage that
takes an env; a task's own ``split`` decides which split it is in (none: train)."""

from __future__ import annotations

from pathlib import Path

from trajforge.envs.registry import EnvEntry, EnvSource, get_env
from trajforge.envs.taskset import TRAIN, TaskSet
from trajforge.errors import ConfigError
from trajforge.schema import Task


def entry(name: str) -> EnvEntry:
    """The env of task file ``name``.

    Raises:
        ConfigError: the file is missing, a line is not a task, or its tasks name no env or
            more than one.
    """
    path = Path(name)
    if not path.is_file():
        raise ConfigError(f"env {name!r}: no such task file")
    declared = list(TaskSet.from_jsonl(path))
    envs = sorted({t.env or "" for t in declared})
    if len(envs) != 1 or not envs[0]:
        named = ", ".join(repr(e) if e else "none" for e in envs) or "no tasks"
        raise ConfigError(
            f"env {name!r}: its tasks must all name one env (field 'env'); found {named}"
        )
    base = get_env(envs[0])

    def tasks(n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
        pool = [t for t in declared if (t.split or TRAIN) == split]
        if not pool:
            held = sorted({t.split or TRAIN for t in declared})
            raise ConfigError(
                f"env {name!r} has no {split} tasks (its tasks' splits: {', '.join(held)}; "
                f"choose one with --split)"
            )
        return list(TaskSet(pool, name=name).shuffled(seed).take(n))

    return EnvEntry(
        name,
        base.make,
        tasks,
        base.expert,
        f"{len(declared)} tasks of {base.name} from {name}",
        base.scripted_user,
        EnvSource.TASK_FILE,
        base.answer_free_verifier,
        stored_name=base.stored_name,
    )
