"""Difficulty filtering and the curriculum on a job: RL steps to a validation target without and
with ``difficulty``.

The job (``--job``: the calculator job, ``examples/calculator/experiment.yaml``, by default;
``examples/keydoor/cpu.yaml`` for keydoor-compact) up to its SFT stage runs once; from that one
SFT checkpoint its RL stage runs once per arm and seed, validating greedily after every
step on training-split tasks the RL never samples (the stage's ``validation.tasks``):

- ``plain``: the stage as the job has it;
- ``difficulty``: the same, plus ``difficulty: {refill: true, band: [0.1, 0.9]}`` (groups that
  scored alike dropped and refilled, fresh tasks preferred in the pass-rate band).

The target is the SFT weights' validation success (step 0, the same for both arms) plus
``--gain``. An arm that never reaches it within ``--steps`` counts ``steps + 1`` (censored, and
said so). The refill arm rolls out more episodes a step; their count is printed beside the steps.

    .venv/bin/python bench/curriculum.py --quick        # the tiny model, micro sizes, ~20 s
    .venv/bin/python bench/curriculum.py --steps 4 --seeds 0 1 2 --out runs/curriculum
    .venv/bin/python bench/curriculum.py --job examples/keydoor/cpu.yaml --steps 20

Prints the per-arm validation curves and steps to target, then ONE JSON line; ``ratio`` is the
mean steps to target without over with (> 1: the difficulty arm gets there sooner).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from calculator_job import JOB, QUICK, rl_index, sft_model

from trajforge.pipeline.config import Experiment, load_experiment, rl_config
from trajforge.train.config import RLConfig
from trajforge.train.rl import RLTrainer

CURVE = "curve.json"
ARMS: dict[str, dict[str, Any] | None] = {
    "plain": None,
    "difficulty": {"refill": True, "band": [0.1, 0.9]},
}


def _rl_config(exp: Experiment, rl_index: int, model: str, arm: str, seed: int, steps: int, out: Path) -> RLConfig:  # fmt: skip
    base = rl_config(exp, rl_index, model=model, run_dir=out / f"{arm}-s{seed}")
    validation = {**base.validation.model_dump(), "every": 1, "keep_best": False}
    raw = {
        **base.model_dump(),
        "seed": seed,
        "steps": steps,
        "validation": validation,
        "difficulty": ARMS[arm],
        "progress": False,
        "tensorboard": False,
        "checkpoint_every": 0,
    }
    return RLConfig.model_validate(raw)


def _arm_run(exp: Experiment, index: int, model: str, arm: str, seed: int, steps: int, out: Path) -> dict[str, Any]:  # fmt: skip
    """One arm's RL run for ``seed``: its validation curve and the episodes it rolled out, read
    back from ``<arm>-s<seed>/curve.json`` when a run before finished it. A run cut short is
    made again from the start, since its validation points died with it."""
    done = out / f"{arm}-s{seed}" / CURVE
    if done.is_file():
        return dict(json.loads(done.read_text()))
    shutil.rmtree(done.parent, ignore_errors=True)  # its store too: run ids are made again
    cfg = _rl_config(exp, index, model, arm, seed, steps, out)
    result = RLTrainer(cfg).train()
    curve = [(int(p["step"]), float(p["success"])) for p in result.validation]
    per_step = [
        (cfg.groups_per_step + h.get("refill_groups", 0.0)) * cfg.samples_per_group
        for h in result.history
    ]
    run = {"seed": seed, "curve": curve, "episodes": sum(per_step), "episodes_per_step": per_step}
    done.parent.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(run))
    return run


def _episodes_to(per_step: list[float], steps: int) -> float:
    """Episodes rolled out up to step ``steps``; past the last step (censored), one more step
    like the last."""
    return sum(per_step[:steps]) + per_step[-1] * max(0, steps - len(per_step))


def _steps_to(curve: list[tuple[int, float]], target: float, steps: int) -> tuple[int, bool]:
    """The first step whose validation success reaches ``target``, or ``steps + 1`` and
    ``True`` (censored) when none does."""
    reached = [step for step, success in curve if step > 0 and success >= target - 1e-9]
    return (reached[0], False) if reached else (steps + 1, True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", type=Path, default=JOB, help="the job (an experiment file)")
    parser.add_argument("--quick", action="store_true",
                        help="the calculator job on the tiny model at micro sizes")  # fmt: skip
    parser.add_argument("--steps", type=int, default=6, help="RL steps per arm and seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--gain", type=float, default=0.1,
                        help="the target: the SFT weights' validation success plus this")  # fmt: skip
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="job overrides, e.g. stages.rl.train.groups_per_step=4")  # fmt: skip
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="run folders; finished runs are read back (default: temp)",
    )
    args = parser.parse_args()
    if args.quick and args.job.resolve() != JOB:
        parser.error("--quick is the calculator job's micro preset; leave --job out")
    exp = load_experiment(args.job, [*(QUICK if args.quick else []), *args.set])
    index = rl_index(exp)
    started = time.perf_counter()
    arms: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        model = sft_model(exp, out)
        runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
        for arm in ARMS:
            for seed in args.seeds:
                runs[arm].append(_arm_run(exp, index, model, arm, seed, args.steps, out))
    # Step 0 is the SFT weights, validated alike in every run of a seed.
    start = sum(r["curve"][0][1] for r in runs["plain"]) / len(args.seeds)
    target = round(start + args.gain, 4)
    for arm, per_seed in runs.items():
        reached = [_steps_to(r["curve"], target, args.steps) for r in per_seed]
        arms[arm] = {
            "steps_to_target": [s for s, _ in reached],
            "censored": [c for _, c in reached],
            "mean_steps": sum(s for s, _ in reached) / len(reached),
            "validation": [r["curve"] for r in per_seed],
            "episodes_rolled_out": [round(r["episodes"]) for r in per_seed],
            "episodes_to_target": [
                round(_episodes_to(r["episodes_per_step"], s))
                for r, (s, _) in zip(per_seed, reached, strict=True)
            ],
        }
        arms[arm]["mean_episodes"] = sum(arms[arm]["episodes_to_target"]) / len(per_seed)
        print(f"  {arm:<11} steps to {target:.3f}: {arms[arm]['steps_to_target']}"
              f" (censored {arms[arm]['censored']}), episodes {arms[arm]['episodes_rolled_out']},"
              f" episodes to target {arms[arm]['episodes_to_target']}")  # fmt: skip
        for r in per_seed:
            print(f"  {'':<11} seed {r['seed']} validation success (step, value) {r['curve']}")
    ratio = round(arms["plain"]["mean_steps"] / arms["difficulty"]["mean_steps"], 3)
    by_episodes = round(arms["plain"]["mean_episodes"] / arms["difficulty"]["mean_episodes"], 3)
    print(
        json.dumps(
            {
                "bench": "curriculum",
                "job": exp.name,
                "model": exp.model,
                "quick": args.quick,
                "steps": args.steps,
                "seeds": args.seeds,
                "start_success": round(start, 4),
                "target": target,
                "arms": arms,
                "cpus": os.cpu_count(),
                "wall_s": round(time.perf_counter() - started, 1),
                "ratio_by_episodes": by_episodes,
                "ratio": ratio,
                "ratio_note": "mean steps to the validation target, plain over difficulty; a "
                "censored arm counts steps + 1",
            }
        )
    )


if __name__ == "__main__":
    main()
