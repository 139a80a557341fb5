"""Asynchronous RL against synchronous RL on the calculator job: does async with staleness 2
and partial rollouts learn as much? Held-out success from one SFT checkpoint, per seed. With
``--peer vllm``: does RL with a vLLM server sampling learn as much as with the in-process engine?

The calculator job (``examples/calculator/experiment.yaml``) up to its SFT stage runs once (or
``--sft`` names a checkpoint); from it, per seed, the job's RL stage runs as the job has it and
then the job's held-out eval (the test split, which tunes nothing), in two arms:

- ``sync``: ``async_staleness: 0``, each step samples from the weights it then trains;
- ``async``: ``async_staleness: --staleness`` (2): the next steps' rollouts run while a step
  trains, from weights up to that many updates old; an episode under way when new weights load
  samples its later turns from them (a partial rollout), every turn recording its version, and
  the job's ``rollout_correction`` corrects per token. Beyond 1 step ahead the rollouts run on
  Ray actors (``ray: {actors: --actors}``, a local cluster of this machine), as the config
  requires;
- ``vllm`` (``--peer vllm``, in place of ``async``): synchronous, a vLLM server sampling
  (``rollout_server: vllm``, the CPU build of ``make setup``), its LoRA adapter following the
  trainer. The issue's comparison is in fp32 on both sides: ``--set precision=fp32``.

Runs go seed by seed, both arms each, so a bench cut short still pairs what finished. Each
finished run is appended to ``OUT/runs.jsonl`` and read back rather than rerun (``--out``).
``--peer-train KEY=VALUE ...`` changes RL settings of the peer arm alone (a variant of the
correction, say); one ``OUT`` holds several variants against the same synchronous runs.

    .venv/bin/python bench/async_learning.py --quick        # tiny model, micro sizes, minutes (Ray's start)
    .venv/bin/python bench/async_learning.py --out runs/async_learning --seeds 0 1 2
    .venv/bin/python bench/async_learning.py --peer vllm --set precision=fp32 --out runs/vllm_learning
    .venv/bin/python bench/async_learning.py --out runs/async_learning --peer-train epochs_per_step=1

Prints per run its held-out success, the train/infer mismatch (``rollout_kl``,
``rollout_log_ratio_max``, the corrections' capped or masked fractions, stale tokens) and the
share of partial rollouts, then ONE JSON line: per arm the per-seed held-out success, its mean
over seeds with a 95% Student-t interval, the mismatch means; the paired async - sync difference
with its interval; ``ratio`` = the peer's (async or vllm) mean held-out success / sync's (null
when sync's is 0).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from calculator_job import JOB, QUICK, QUICK_EVAL, rl_index, sft_model

from trajforge.judge.stats import mean_ci95, wilson_ci95
from trajforge.pipeline.config import STORE_FILE, EvalStage, Experiment, RLStage, load_experiment
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.store import TrajectoryStore
from trajforge.train.rl.staleness import turn_versions

BASELINE = "sync"
PEERS = ("async", "vllm")
HELD_OUT = "held_out"
RUNS_FILE = "runs.jsonl"
# Steps enough for staleness 2 to sample two steps ahead at micro sizes.
QUICK_STEPS = ["stages.rl.train.steps=3"]
# Per step figures of the train/infer mismatch and staleness (docs/metrics.md): averaged over a
# run's steps, except the largest of those named in PEAKS.
MISMATCH = (
    "rollout_kl",
    "rollout_kl_turn_start",
    "rollout_logprob_gap",
    "rollout_log_ratio_max",
    "rollout_is_weight_mean",
    "rollout_is_capped_frac",
    "rollout_masked_frac",
    "rollout_seq_masked_frac",
    "stale_token_frac",
    "stale_samples",
    "token_staleness_mean",
    "policy_staleness_max",
)
PEAKS = {"rollout_log_ratio_max", "policy_staleness_max"}


def _arm_train(rl: RLStage, arm: str, args: argparse.Namespace) -> dict[str, Any]:
    """The job's RL stage settings for ``arm``: only ``async_staleness`` (and, past one step
    ahead, the Ray actors it needs) or the sampler differ, and the peer's ``--peer-train``."""
    if arm == BASELINE:
        return {**rl.train, "async_staleness": 0}
    if arm == "vllm":
        return {**rl.train, "async_staleness": 0, "rollout_server": "vllm", **args.peer_train}
    ray = {"ray": {"actors": args.actors}} if args.staleness > 1 else {}
    return {**rl.train, "async_staleness": args.staleness, **ray, **args.peer_train}


def _train_overrides(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs of RL train settings, each value read as YAML."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--peer-train {pair!r}: expected KEY=VALUE")
        out[key] = yaml.safe_load(value)
    return out


def _partial_rollouts(store: Path, rollouts: str) -> dict[str, int]:
    """Of the RL stage's rollouts (run ids ``<rollouts><step>``; its validation and the eval
    aside), the episodes whose turns were sampled by more than one weights version (partial
    rollouts)."""
    versioned = partial = 0
    for traj in TrajectoryStore(store).iter_query():
        if (traj.run_id or "").startswith(rollouts):
            versioned += 1
            partial += len({v for v in turn_versions(traj) if v is not None}) > 1
    return {"partial_episodes": partial, "versioned_episodes": versioned}


def _mismatch(history: list[dict[str, Any]]) -> dict[str, float]:
    """The run's mismatch figures over its steps (those it logged)."""
    out = {}
    for key in MISMATCH:
        values = [float(h[key]) for h in history if key in h]
        if values:
            out[key] = max(values) if key in PEAKS else sum(values) / len(values)
    return out


def _run(exp: Experiment, model: str, arm: str, seed: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:  # fmt: skip
    """The RL stage then the held-out eval of ``arm`` from ``model`` with ``seed``."""
    index = rl_index(exp)
    rl = exp.stages[index]
    assert isinstance(rl, RLStage)
    train = _arm_train(rl, arm, args)
    stages = [RLStage(name=rl.name, train=train), EvalStage(name=HELD_OUT)]
    name = f"{arm}-s{seed}" + "".join(f"-{k}-{v}" for k, v in _overrides(arm, args).items())
    run = Experiment.model_validate(
        {
            **exp.model_dump(),
            "name": name,
            "model": model,
            "seed": seed,
            "stages": [s.model_dump() for s in stages],
        }
    )
    started = time.perf_counter()
    results = ExperimentRunner(run, run_dir=out / name).run()
    wall = time.perf_counter() - started
    done = {s["name"]: s for s in results["stages"] if s["status"] == "done"}
    summary = done[HELD_OUT]["summary"]
    return {
        "arm": arm,
        "seed": seed,
        "async_staleness": train["async_staleness"],
        "train_overrides": _overrides(arm, args),
        "held_out": round(float(summary["success"]), 4),
        "held_out_episodes": int(summary["episodes"]),
        "validation": [(int(p["step"]), float(p["success"])) for p in done[rl.name]["validation"]],
        "kept_step": done[rl.name]["kept_step"],
        "reward_curve": [round(h["reward_mean"], 3) for h in done[rl.name]["history"]],
        "mismatch": _mismatch(done[rl.name]["history"]),
        **_partial_rollouts(out / name / STORE_FILE, f"{name}.{rl.name}.step"),
        "wall_s": round(wall, 1),
    }


def _overrides(arm: str, args: argparse.Namespace) -> dict[str, Any]:
    """What ``--peer-train`` changed in ``arm``'s run: a recorded run is reused only for the
    same."""
    return {} if arm == BASELINE else dict(args.peer_train)


def _show(r: dict[str, Any]) -> str:
    n = r["held_out_episodes"]
    low, high = wilson_ci95(r["held_out"] * n, n)
    figures = " ".join(f"{k}={v:.3g}" for k, v in r["mismatch"].items())
    return (
        f"  {r['arm']:<5} seed {r['seed']}: held-out {r['held_out']:.2f} [{low:.2f}, {high:.2f}]"
        f" of {n}, validation {r['validation']}, partial rollouts {r['partial_episodes']}/"
        f"{r['versioned_episodes']}, {r['wall_s']:.0f} s\n        {figures}"
    )


def _interval(values: list[float]) -> dict[str, Any]:
    ci = mean_ci95(values)
    return {"mean": round(ci.mean, 4), "ci95": (round(ci.low, 4), round(ci.high, 4))}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _arm_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = sorted({k for r in runs for k in r["mismatch"]})
    return {
        "held_out": [r["held_out"] for r in runs],
        **_interval([r["held_out"] for r in runs]),
        "mismatch_mean": {
            k: round(_mean([r["mismatch"][k] for r in runs if k in r["mismatch"]]), 6) for k in keys
        },
        "partial_episode_frac": round(
            sum(r["partial_episodes"] for r in runs)
            / max(sum(r["versioned_episodes"] for r in runs), 1),
            4,
        ),
        "wall_s": [r["wall_s"] for r in runs],
    }


def _paired(runs: dict[str, list[dict[str, Any]]], peer: str) -> dict[str, Any]:
    """The peer - sync held-out difference over the seeds both arms finished."""
    sync = {r["seed"]: r["held_out"] for r in runs[BASELINE]}
    diffs = [r["held_out"] - sync[r["seed"]] for r in runs[peer] if r["seed"] in sync]
    return {"seeds": len(diffs), **_interval(diffs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the tiny model at micro sizes")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--peer", choices=PEERS, default="async", help="the arm against sync")
    parser.add_argument("--staleness", type=int, default=2, help="the async arm's async_staleness")
    parser.add_argument("--actors", type=int, default=1, help="Ray rollout actors (staleness > 1)")
    parser.add_argument("--sft", default=None, help="an SFT checkpoint to start from (default: run the job to SFT)")  # fmt: skip
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="job overrides, e.g. stages.rl.train.rollout_correction=icepop")  # fmt: skip
    parser.add_argument("--peer-train", nargs="*", default=[], metavar="KEY=VALUE",
                        help="RL train settings of the peer arm only, e.g. epochs_per_step=1")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="run folders (default: temp)")
    args = parser.parse_args()
    args.peer_train = _train_overrides(args.peer_train)
    preset = [*QUICK, *QUICK_EVAL, *QUICK_STEPS] if args.quick else []
    exp = load_experiment(JOB, [*preset, *args.set])
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        log = out / RUNS_FILE
        recorded = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []  # fmt: skip
        model = args.sft or sft_model(exp, out)
        runs: dict[str, list[dict[str, Any]]] = {BASELINE: [], args.peer: []}
        for seed in args.seeds:
            for arm in runs:
                key = (arm, seed, _overrides(arm, args))
                found = [r for r in recorded if (r["arm"], r["seed"], r.get("train_overrides", {})) == key]  # fmt: skip
                result = found[-1] if found else _run(exp, model, arm, seed, args, out)
                if not found:
                    with log.open("a") as f:
                        f.write(json.dumps(result) + "\n")
                runs[arm].append(result)
                print(_show(result), flush=True)
    arms = {arm: _arm_summary(per_seed) for arm, per_seed in runs.items()}
    sync_mean, peer_mean = arms[BASELINE]["mean"], arms[args.peer]["mean"]
    correction = exp.stages[rl_index(exp)].train.get("rollout_correction", "token_tis")
    print(
        json.dumps(
            {
                "bench": "async_learning",
                "peer": args.peer,
                "job": "calculator",
                "model": exp.model,
                "quick": args.quick,
                "seeds": args.seeds,
                "staleness": args.staleness,
                "actors": args.actors if args.staleness > 1 else 0,
                "rollout_correction": correction,
                "peer_train": args.peer_train,
                "arms": arms,
                f"{args.peer}_minus_sync": _paired(runs, args.peer),
                "cpus": os.cpu_count(),
                "wall_s": round(time.perf_counter() - started, 1),
                "runs_wall_s": round(sum(r["wall_s"] for arm in runs.values() for r in arm), 1),
                "ratio": round(peer_mean / sync_mean, 3) if sync_mean else None,
                "ratio_note": f"{args.peer} mean held-out success over sync's (null: sync solved none)",
            }
        )
    )


if __name__ == "__main__":
    main()
