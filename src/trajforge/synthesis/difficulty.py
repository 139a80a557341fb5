"""Difficulty matching: keep synthesized tasks so that their difficulty mix is a reference task
set's (the env's training split, or a task file).

Exploration reaches what is near more often than what is far, so a synthesized set is easier
than the tasks it stands in for (a keydoor walk seldom fetches a key and crosses its door), and
demonstrations on it teach less of what the hard tasks need. A task's difficulty here is the
number of turns the env's expert needs to solve it, which every env with an expert gives. The
reference's lengths are cut into ``GROUPS`` runs of consecutive lengths, each holding at least
``1/GROUPS`` of the reference (a short tail joins the last run); each synthesized task falls
into the run of its length, and each
run keeps, drawn by the seed, its reference share of the largest set every run can fill. A task
shorter or longer than every reference task is dropped (no reference share asks for it).

Held-out tasks never tune synthesis: the reference is the training split or a file of training
tasks.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections import Counter
from pathlib import Path

from trajforge.envs import TaskSet, get_env
from trajforge.errors import ConfigError, DataError
from trajforge.rollout import PolicyRef, RolloutSpec, run_rollout
from trajforge.schema import Role, Task, is_success

TRAIN_REFERENCE = "train"
GROUPS = 4
UNSOLVED = "the expert does not solve it"
OUTSIDE_MIX = "beyond the reference's difficulty mix"


def reference_tasks(env: str, reference: str, n: int, seed: int, key: str) -> list[Task]:
    """The reference tasks ``reference`` names: ``train`` (``n`` of the env's training split) or
    a task file of ``env``'s training tasks; anything else is one ``ConfigError`` naming
    ``key``."""
    if reference == TRAIN_REFERENCE:
        return get_env(env).tasks(n, seed=seed, split="train")
    path = Path(reference)
    if path.suffix != ".jsonl" or not path.is_file():
        raise ConfigError(f"{key} {reference!r}: neither {TRAIN_REFERENCE!r} (the env's "
                          "training split) nor an existing task file (.jsonl)")  # fmt: skip
    try:
        tasks = list(TaskSet.from_jsonl(path, env=env))
    except DataError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    if not tasks:
        raise ConfigError(f"{key} {reference}: the task file holds no task")
    for task in tasks:
        if task.env != env:
            raise ConfigError(f"{key} {reference}: task {task.id!r} is of env {task.env!r}, "
                              f"not {env!r}")  # fmt: skip
        if task.split != "train":
            raise ConfigError(f"{key} {reference}: task {task.id!r} is a {task.split} task; "
                              "held-out tasks never tune synthesis")  # fmt: skip
    return tasks


def solution_lengths(env: str, tasks: list[Task]) -> dict[str, int]:
    """The turns the env's expert takes to solve each task it solves (greedy, one episode)."""
    if not tasks:
        return {}
    spec = RolloutSpec(env=env, policy=PolicyRef(name="expert"), tasks=tasks)
    return {
        t.task.id: sum(1 for m in t.messages if m.role is Role.ASSISTANT)
        for t in run_rollout(spec)
        if is_success(t.outcome.status, t.outcome.reward)
    }


def length_groups(reference: list[int]) -> list[tuple[int, int, float]]:
    """Runs of consecutive lengths ``(lowest, highest, share of the reference)``, each run at
    least ``1/GROUPS`` of it but the merged tail."""
    counts = sorted(Counter(reference).items())
    total, floor = len(reference), len(reference) / GROUPS
    groups: list[list[int]] = []  # [lowest, highest, count]
    for length, count in counts:
        if not groups or groups[-1][2] >= floor:
            groups.append([length, length, count])
        else:
            groups[-1][1:] = [length, groups[-1][2] + count]
    if len(groups) > 1 and groups[-1][2] < floor:
        _, high, count = groups.pop()
        groups[-1][1:] = [high, groups[-1][2] + count]
    return [(low, high, count / total) for low, high, count in groups]


def match_difficulty(
    tasks: list[Task], lengths: dict[str, int], reference: list[int], seed: int, key: str
) -> list[Task]:
    """The tasks (each with a length in ``lengths``) kept so that their lengths' mix is the
    ``reference`` lengths' (module docstring); a run of the reference no task falls into is
    one ``ConfigError`` naming ``key``."""
    if not reference:
        raise ConfigError(f"{key}: the env's expert solves no reference task")
    groups = length_groups(reference)
    highs = [high for _, high, _ in groups]
    members: list[list[Task]] = [[] for _ in groups]
    for task in tasks:
        if groups[0][0] <= lengths[task.id] <= highs[-1]:
            members[bisect_left(highs, lengths[task.id])].append(task)
    for (low, high, share), inside in zip(groups, members, strict=True):
        if not inside:
            span = f"{low}" if low == high else f"{low}-{high}"
            raise ConfigError(f"{key}: no synthesized task takes the expert {span} turns, as "
                              f"{share:.0%} of the reference does; explore more")  # fmt: skip
    size = min(len(inside) / share for (_, _, share), inside in zip(groups, members, strict=True))
    rng = random.Random(f"match:{seed}")
    kept: list[Task] = []
    for (_, _, share), inside in zip(groups, members, strict=True):
        kept += rng.sample(inside, max(1, min(len(inside), round(size * share))))
    order = {task.id: i for i, task in enumerate(tasks)}
    return sorted(kept, key=lambda task: order[task.id])


def match_reference(
    env: str, tasks: list[Task], reference: str, n: int, seed: int, key: str
) -> tuple[list[Task], Counter[str]]:
    """``tasks`` matched to the difficulty mix of ``reference`` (``n`` tasks when it is the
    training split), each kept task recording its ``expert_turns``; the others counted by
    reason."""
    lengths = solution_lengths(env, tasks)
    reached = solution_lengths(env, reference_tasks(env, reference, n, seed, key))
    solved = [_with_turns(task, lengths[task.id]) for task in tasks if task.id in lengths]
    kept = match_difficulty(solved, lengths, list(reached.values()), seed, key)
    dropped = Counter({UNSOLVED: len(tasks) - len(solved), OUTSIDE_MIX: len(solved) - len(kept)})
    return kept, +dropped


def _with_turns(task: Task, turns: int) -> Task:
    provenance = {**task.data["synthesis"], "expert_turns": turns}
    return task.model_copy(update={"data": {**task.data, "synthesis": provenance}})
