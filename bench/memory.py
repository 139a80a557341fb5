"""Experience memory on the embedded model after SFT: a job's held-out eval without and with a
memory of the SFT weights' own episodes on training tasks, per seed.

Per seed, in ``OUT/<job>-s<seed>``, the job (``--job``, the web job by default) runs its stages
up to its first eval after its last SFT stage (the base eval left out): that eval is the arm
**without** memory. Then, from the same weights and in the same run folder:

- ``experience``: the SFT weights' greedy episodes on ``--experience`` training-split tasks
  (the sample's seed is the run's seed + ``EXPERIENCE_SEED``, away from the demonstrations');
- ``memory``: one item per episode distilled by rules (what worked; what failed and how);
- ``with_memory``: the held-out eval again, the top ``--k`` items by BM25 for each task in its
  system message: the arm **with** memory.

A run folder of the job made before (``trajforge run JOB seed=N --out DIR``) can be copied to
``OUT/<job>-s<N>``: its finished stages are reused by fingerprint, so only the memory's stages run.

    .venv/bin/python bench/memory.py --quick                  # the tiny model, calculator job
    TRAJFORGE_BROWSERS=8 .venv/bin/python bench/memory.py --out runs/memory --seeds 0 1 2

Prints per seed both held-out rates (Wilson 95%) and the memory's items, then ONE JSON line:
``ratio`` = mean success with memory / without; ``gain_points`` the paired difference's mean
and its 95% t interval over seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from calculator_job import JOB as CALCULATOR
from calculator_job import QUICK, QUICK_EVAL
from over_seeds import over_seeds
from stage_records import done_record, stage_rate

from trajforge.judge.stats import difference_ci95
from trajforge.pipeline.config import (
    DemonstrationStage,
    EvalStage,
    Experiment,
    MemoryStage,
    SFTStage,
    load_experiment,
)
from trajforge.pipeline.runner import ExperimentRunner

WEB = Path(__file__).resolve().parents[1] / "examples" / "web" / "experiment.yaml"
EXPERIENCE_SEED = 100
"""Added to the run's seed for the experience tasks' sample."""


def _prefix(exp: Experiment) -> tuple[list[Any], str]:
    """The job's stages up to its first eval after its last SFT stage, the base eval left out,
    and that eval's name."""
    last_sft = max(i for i, s in enumerate(exp.stages) if isinstance(s, SFTStage))
    after = next(
        (i for i, s in enumerate(exp.stages) if i > last_sft and isinstance(s, EvalStage)), None
    )
    if after is None:
        raise SystemExit(f"{exp.name}: no eval stage after the last SFT stage to compare with")
    stages = [s for s in exp.stages[:after] if not isinstance(s, EvalStage)]
    return [*stages, exp.stages[after]], exp.stages[after].name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", type=Path, default=WEB, help="the job (an experiment file)")
    parser.add_argument("--quick", action="store_true", help="the calculator job, tiny model")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--experience", type=int, default=96, help="training tasks the memory comes from")  # fmt: skip
    parser.add_argument("--k", type=int, default=3, help="memory items per task")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="job overrides")
    parser.add_argument("--out", type=Path, default=Path("runs/memory"), help="run folders, resumed")  # fmt: skip
    args = parser.parse_args()
    job, overrides = (CALCULATOR, [*QUICK, *QUICK_EVAL]) if args.quick else (args.job, [])
    experience = 4 if args.quick else args.experience
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for seed in args.seeds:
        exp = load_experiment(job, [*overrides, *args.set, f"seed={seed}"])
        prefix, without = _prefix(exp)
        run_dir = args.out / f"{exp.name}-s{seed}"
        # The SFT weights are known once the prefix has run (or been found done).
        runner = ExperimentRunner(exp.model_copy(update={"stages": prefix}), run_dir=run_dir)
        runner.run()
        weights = runner.weights([s.name for s in prefix if isinstance(s, SFTStage)][-1])
        stages = [
            *prefix,
            # Played under the eval's limits, so its lessons are of the episodes the eval sees.
            DemonstrationStage(
                name="experience",
                policy=weights,
                tasks=experience,
                seed=seed + EXPERIENCE_SEED,
                max_turns=exp.eval.max_turns,
                max_new_tokens=exp.eval.max_new_tokens,
            ),
            MemoryStage(name="memory", stages=["experience"]),
            EvalStage(name="with_memory", memory="memory", memory_k=args.k),
        ]
        results = ExperimentRunner(exp.model_copy(update={"stages": stages}), run_dir=run_dir).run()  # fmt: skip
        (off, n), (on, _) = stage_rate(results, without), stage_rate(results, "with_memory")
        items = done_record(results, "memory").get("text", "")
        retrieved = float(done_record(results, "with_memory")["memory"]["retrieved_mean"])
        if retrieved == 0:
            raise SystemExit(f"seed {seed}: the memory gave no held-out task an item: nothing to measure")  # fmt: skip
        rows.append({"seed": seed, "without": off, "with": on, "retrieved": retrieved})
        print(f"  seed {seed}: without memory {off.text()}, with {on.text()} ({n} held-out "
              f"episodes, {retrieved:.2f} items a task); memory: {items}")  # fmt: skip
    without_rates = [r["without"].value for r in rows]
    with_rates = [r["with"].value for r in rows]
    diff = difference_ci95([b - a for a, b in zip(without_rates, with_rates, strict=True)])
    mean_off = sum(without_rates) / len(rows)
    print(
        json.dumps(
            {
                "bench": "memory",
                "job": str(job),
                "quick": args.quick,
                "seeds": args.seeds,
                "experience_tasks": experience,
                "k": args.k,
                "retrieved_mean": [r["retrieved"] for r in rows],
                "without": {"per_seed": without_rates, "seeds": over_seeds(without_rates)},
                "with": {"per_seed": with_rates, "seeds": over_seeds(with_rates)},
                "gain_points": {
                    "mean": round(100 * diff.mean, 1),
                    "ci95": (round(100 * diff.low, 1), round(100 * diff.high, 1)),
                },
                "cpus": os.cpu_count(),
                "wall_s": round(time.perf_counter() - started, 1),
                "ratio": round(sum(with_rates) / len(rows) / mean_off, 3) if mean_off else None,
                "ratio_note": "mean held-out success with memory / without",
            }
        )
    )


if __name__ == "__main__":
    main()
