"""SFT on synthesized repository tasks (SWE-smith's way): demonstrations on bugs injected into
some functions of a real package, judged on bugs injected into its other functions.

The package is ``bench/bug_synthesis.py``'s pinned sdist (``inflection==0.5.1``, 455 tests).
Its bugs are synthesized once (``synthesize_bugs``: ``--count`` rule changes tried, each kept
when some of the package's tests fail after it), written to ``OUT/bugs.jsonl`` and read back on
a rerun. Per seed, the package's functions are shuffled with the seed and taken as held out
until they hold ``--held-out`` of the tasks, skipping a function that alone holds more than
half (it would leave too little to learn from); the others' tasks are for training. In
``OUT/s<seed>``, one experiment on that task file (env ``repo``: each episode a fresh copy of the
buggy package in the sandbox, ``bash`` and ``edit_file``, reward 1 when all its tests pass):
the embedded model's held-out success (``base``), the env's expert on every training task, SFT,
the held-out success again (``after_sft``). No hand-written arm: the package has no task list.

    .venv/bin/python bench/repo_synthesis.py --out runs/repo_synthesis --seeds 0 1 2
    .venv/bin/python bench/repo_synthesis.py --quick   # 20 changes, 1 seed, 2 SFT steps

Prints per seed both rates (Wilson 95%), then ONE JSON line; ``ratio`` = the mean gain in
held-out success over seeds (after_sft - base, a fraction) with its 95% t interval in
``gain_ci95``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bug_synthesis import PACKAGE, VERSION, fetch
from stage_records import stage_rate

from trajforge.envs import TaskSet
from trajforge.judge.stats import difference_ci95
from trajforge.pipeline.config import Experiment
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.schema import Task
from trajforge.store import TrajectoryStore
from trajforge.synthesis.bugs import synthesize_bugs
from trajforge.synthesis.report import write_tasks

BUGS_FILE = "bugs.jsonl"
TRAIN, TEST = "train", "test"
# A demonstration is the failing tests' names, then one edit_file call holding the function
# twice (as changed and as it was): the longest of inflection's fit in 2,048 tokens, and its
# call in 1,024 new tokens.
SFT_TRAIN: dict[str, Any] = {
    "max_seq_len": 2048,
    "epochs": 2,
    "batch_size": 4,
    "optim": {"lr": 1.0e-4, "schedule": "cosine", "warmup_steps": 3},
}
EVAL: dict[str, Any] = {"split": TEST, "temperature": 0.0, "max_turns": 4, "max_new_tokens": 1024}


def _bugs(out: Path, count: int) -> list[Task]:
    """The package's synthesized bug tasks: made once, then read back."""
    path = out / BUGS_FILE
    if not path.is_file():
        report = synthesize_bugs(fetch(PACKAGE, VERSION), count, seed=0)
        print(f"{PACKAGE}=={VERSION}: {report.text}", flush=True)
        write_tasks(path, report.tasks)
    return list(TaskSet.from_jsonl(path))


def held_out_functions(tasks: list[Task], seed: int, share: float) -> set[str]:
    """The functions whose tasks are held out for ``seed``: in an order set by the seed, until
    they hold ``share`` of the tasks; a function holding more than half is never held out."""
    count = Counter(_function(t) for t in tasks)
    order = sorted(count)
    random.Random(seed).shuffle(order)
    held: set[str] = set()
    for name in order:
        if sum(count[f] for f in held) >= share * len(tasks):
            break
        if count[name] <= len(tasks) / 2:
            held.add(name)
    return held


def _function(task: Task) -> str:
    return f"{task.data['file']}:{task.data['function']}"


def _split_file(tasks: list[Task], held: set[str], path: Path) -> dict[str, int]:
    """The tasks with their splits set, written to ``path``; how many of each."""
    split = [t.model_copy(update={"split": TEST if _function(t) in held else TRAIN}) for t in tasks]
    write_tasks(path, split)
    return dict(Counter(t.split or TRAIN for t in split))


def _experiment(tasks_file: Path, seed: int, sizes: dict[str, int], quick: bool) -> Experiment:
    sft = {**SFT_TRAIN, **({"max_steps": 2} if quick else {})}
    return Experiment.model_validate(
        {
            "name": "repo",
            "env": str(tasks_file),
            "model": "embedded",
            "seed": seed,
            "precision": "auto",
            "eval": {**EVAL, "tasks": sizes[TEST]},
            "stages": [
                {"kind": "eval", "name": "base"},
                {
                    "kind": "demonstrations",
                    "tasks": sizes[TRAIN],
                    "seed": seed,
                    "max_new_tokens": EVAL["max_new_tokens"],
                },
                {"kind": "sft", "train": sft},
                {"kind": "eval", "name": "after_sft"},
            ],
        }
    )


def _edits(store_path: Path, run_id: str) -> dict[str, int]:
    """What a run's ``edit_file`` calls did: all of them, and those whose new text is the old
    one (the form of a fix, without one)."""
    calls = []
    with TrajectoryStore(store_path) as store:
        for traj in store.iter_query(run=run_id):
            calls += [c for m in traj.messages for c in m.tool_calls if c.name == "edit_file"]
    unchanged = sum(c.arguments.get("old") == c.arguments.get("new") for c in calls)
    return {"edit_calls": len(calls), "unchanged": unchanged}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200, help="changes tried")
    parser.add_argument("--held-out", type=float, default=0.25, help="share of tasks held out")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true", help="20 changes, 1 seed, 2 SFT steps")
    parser.add_argument("--out", type=Path, default=Path("runs/repo_synthesis"))
    args = parser.parse_args()
    seeds = [args.seeds[0]] if args.quick else args.seeds
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    tasks = _bugs(args.out, 20 if args.quick else args.count)
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        run_dir = args.out / f"s{seed}"
        run_dir.mkdir(exist_ok=True)
        held = held_out_functions(tasks, seed, args.held_out)
        sizes = _split_file(tasks, held, run_dir / "tasks.jsonl")
        if not held or sizes.get(TRAIN, 0) == 0:
            raise SystemExit(f"seed {seed}: {sizes} tasks by split: no held-out or no training tasks")  # fmt: skip
        exp = _experiment(run_dir / "tasks.jsonl", seed, sizes, args.quick)
        runner = ExperimentRunner(exp, run_dir=run_dir)
        results = runner.run()
        (base, _), (after, _) = stage_rate(results, "base"), stage_rate(results, "after_sft")
        after_run = next(s["run_id"] for s in results["stages"] if s["name"] == "after_sft")
        edits = _edits(runner.store_path, after_run)
        rows.append({"seed": seed, "held_out_functions": sorted(held), **sizes,
                     "base": base.value, "after_sft": after.value, "after_sft_edits": edits})  # fmt: skip
        print(f"  seed {seed}: held out {sorted(held)} ({sizes[TEST]} tasks; "
              f"{sizes[TRAIN]} to train on): base {base.text()}, after SFT {after.text()}; "
              f"its edits {edits}", flush=True)  # fmt: skip
    gain = difference_ci95([r["after_sft"] - r["base"] for r in rows])
    print(
        json.dumps(
            {
                "bench": "repo_synthesis",
                "package": f"{PACKAGE}=={VERSION}",
                "model": "embedded",
                "quick": args.quick,
                "tasks": len(tasks),
                "functions": len({_function(t) for t in tasks}),
                "per_seed": rows,
                "cpus": os.cpu_count(),
                "wall_s": round(time.perf_counter() - started, 1),
                "ratio": round(gain.mean, 4),
                "gain_ci95": (round(gain.low, 4), round(gain.high, 4)),
                "ratio_note": "mean held-out success after SFT on synthesized bugs - base",
            }
        )
    )


if __name__ == "__main__":
    main()
