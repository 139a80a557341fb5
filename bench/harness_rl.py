"""RL on a harness: held-out gain of the calculator job whose RL episodes come from an agent
written with the OpenAI Agents SDK (``examples/agents_sdk_rl``), over seeds.

The job (``examples/agents_sdk_rl/experiment.yaml``: the teacher's demonstrations, SFT, the
held-out eval ``after_sft``) runs once up to its RL stage, its base eval left out (or ``--sft``
names the checkpoint of a run of the same stages, and only ``after_sft`` runs); from that one
SFT checkpoint, per seed, the job's RL stage runs (each episode one run of the SDK agent against
the gateway over the weights being trained, rewarded by the env's verifier), then the held-out
eval ``after_rl``. The held-out tasks are the test split's (the same tasks for every eval, which
tune nothing); ``after_sft`` is greedy from one checkpoint, so it is one figure for every seed.

Each finished run (the SFT prefix, each seed) is appended to ``OUT/runs.jsonl`` and read back
rather than rerun (``--out``), so a bench cut short keeps what finished.

    .venv/bin/python bench/harness_rl.py --quick        # the tiny model, micro sizes, minutes
    .venv/bin/python bench/harness_rl.py --out runs/harness_rl --seeds 0 1 2
    .venv/bin/python bench/harness_rl.py --sft runs/calculator/sft/final --out runs/harness_rl

Prints per seed the held-out success after SFT and after RL, then ONE JSON line: per seed
``after_rl`` and ``gain``, the mean gain with its 95% Student-t interval over seeds, wall times,
and ``ratio`` = mean held-out success after RL over after SFT (null when SFT's is 0).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from calculator_job import QUICK, QUICK_EVAL, rl_index

from trajforge.judge.stats import mean_ci95, wilson_ci95
from trajforge.pipeline.config import EvalStage, Experiment, SFTStage, load_experiment
from trajforge.pipeline.runner import ExperimentRunner

JOB = Path(__file__).resolve().parents[1] / "examples" / "agents_sdk_rl" / "experiment.yaml"
AFTER_SFT, AFTER_RL = "after_sft", "after_rl"
RUNS_FILE = "runs.jsonl"


def _run(exp: Experiment, name: str, stages: list[Any], out: Path, **keys: Any) -> tuple[dict[str, Any], float]:  # fmt: skip
    """``stages`` of the job as run ``name`` (``keys`` over the job's), its done stages by name
    and its wall time."""
    run = Experiment.model_validate(
        {**exp.model_dump(), **keys, "name": name, "stages": [s.model_dump() for s in stages]}
    )
    started = time.perf_counter()
    results = ExperimentRunner(run, run_dir=out / name).run()
    done = {s["name"]: s for s in results["stages"] if s["status"] == "done"}
    return done, round(time.perf_counter() - started, 1)


def _held_out(stage: dict[str, Any]) -> dict[str, Any]:
    summary = stage["summary"]
    return {"success": round(float(summary["success"]), 4), "episodes": int(summary["episodes"])}


def _durations(done: dict[str, Any]) -> dict[str, float]:
    return {name: round(float(stage["duration_s"]), 1) for name, stage in done.items()}


def _sft(exp: Experiment, out: Path, checkpoint: str | None) -> dict[str, Any]:
    """The job up to its RL stage, the evals before SFT left out (or, from ``checkpoint``, only
    the eval after SFT): the SFT checkpoint and its held-out success."""
    if checkpoint is not None:
        done, wall = _run(exp, "sft", [EvalStage(name=AFTER_SFT)], out, model=checkpoint)
        model = checkpoint
    else:
        first_train = next(i for i, s in enumerate(exp.stages) if isinstance(s, SFTStage))
        stages = [
            s
            for i, s in enumerate(exp.stages[: rl_index(exp)])
            if i > first_train or not isinstance(s, EvalStage)
        ]
        sft = [s.name for s in stages if isinstance(s, SFTStage)][-1]
        done, wall = _run(exp, "sft", stages, out)
        model = str(done[sft]["model"])
    return {
        "run": "sft",
        "model": model,
        AFTER_SFT: _held_out(done[AFTER_SFT]),
        "stage_s": _durations(done),
        "wall_s": wall,
    }


def _rl(exp: Experiment, model: str, seed: int, out: Path) -> dict[str, Any]:
    """The job's RL stage from ``model`` with ``seed``, then the held-out eval."""
    rl = exp.stages[rl_index(exp)]
    done, wall = _run(exp, f"rl-s{seed}", [rl, EvalStage(name=AFTER_RL)], out, model=model, seed=seed)  # fmt: skip
    stage = done[rl.name]
    return {
        "run": f"rl-s{seed}",
        "seed": seed,
        AFTER_RL: _held_out(done[AFTER_RL]),
        "validation": [(int(p["step"]), float(p["success"])) for p in stage["validation"]],
        "kept_step": stage["kept_step"],
        "reward_curve": [round(h["reward_mean"], 3) for h in stage["history"]],
        "stage_s": _durations(done),
        "wall_s": wall,
    }


def _recorded(log: Path, run: str, make: Any) -> dict[str, Any]:
    """Run ``run`` as read back from ``log``, else made by ``make()`` and appended to it."""
    found = [r for r in (json.loads(line) for line in log.read_text().splitlines()) if r["run"] == run] if log.is_file() else []  # fmt: skip
    if found:
        return found[-1]
    result: dict[str, Any] = make()
    with log.open("a") as f:
        f.write(json.dumps(result) + "\n")
    return result


def _gain_interval(gains: list[float]) -> dict[str, Any]:
    """The mean gain and its 95% Student-t interval. A gain lies in [-1, 1]: ``mean_ci95`` cuts
    an interval of values in [0, 1] to [0, 1], so it is given the gains mapped there (a linear
    map, which the t interval follows) and the interval is mapped back."""
    ci = mean_ci95([(g + 1) / 2 for g in gains])
    return {
        "mean": round(2 * ci.mean - 1, 4),
        "ci95": (round(2 * ci.low - 1, 4), round(2 * ci.high - 1, 4)),
    }


def _show(sft: dict[str, Any], r: dict[str, Any]) -> str:
    held = r[AFTER_RL]
    low, high = wilson_ci95(held["success"] * held["episodes"], held["episodes"])
    return (
        f"  seed {r['seed']}: held-out {sft[AFTER_SFT]['success']:.2f} after SFT -> "
        f"{held['success']:.2f} [{low:.2f}, {high:.2f}] after RL, validation {r['validation']}, "
        f"kept step {r['kept_step']}, rewards {r['reward_curve']}, {r['wall_s']:.0f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the tiny model at micro sizes")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sft", default=None, help="an SFT checkpoint of the job to start from (default: run the job to SFT)")  # fmt: skip
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="job overrides, e.g. stages.rl.train.steps=2")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="run folders (default: temp)")
    args = parser.parse_args()
    exp = load_experiment(JOB, [*([*QUICK, *QUICK_EVAL] if args.quick else []), *args.set])
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        log = out / RUNS_FILE
        sft = _recorded(log, "sft", lambda: _sft(exp, out, args.sft))
        print(f"  SFT: held-out {sft[AFTER_SFT]['success']:.2f}, {sft['wall_s']:.0f} s", flush=True)  # fmt: skip
        runs = []
        for seed in args.seeds:
            runs.append(_recorded(log, f"rl-s{seed}", lambda s=seed: _rl(exp, sft["model"], s, out)))  # fmt: skip
            print(_show(sft, runs[-1]), flush=True)
    before = sft[AFTER_SFT]["success"]
    after = [r[AFTER_RL]["success"] for r in runs]
    gains = [round(a - before, 4) for a in after]
    print(
        json.dumps(
            {
                "bench": "harness_rl",
                "harness": "openai-agents",
                "job": "agents_sdk_rl",
                "model": exp.model,
                "quick": args.quick,
                "seeds": args.seeds,
                AFTER_SFT: before,
                AFTER_RL: after,
                "gain": gains,
                "mean_gain": _gain_interval(gains),
                "kept_step": [r["kept_step"] for r in runs],
                "sft_stage_s": sft["stage_s"],
                "rl_stage_s": [r["stage_s"] for r in runs],
                "cpus": os.cpu_count(),
                "wall_s": round(time.perf_counter() - started, 1),
                "ratio": round(sum(after) / len(after) / before, 3) if before else None,
                "ratio_note": "mean held-out success after RL over after SFT (null: SFT solved none)",
            }
        )
    )


if __name__ == "__main__":
    main()
