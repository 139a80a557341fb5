"""How far the rollout sampler's logprobs sit from the trainer's, per precision, and what
truncated importance sampling makes of it (docs/metrics.md, ``rollout_logprob_gap``).

Three set-ups, the same RL run on the calculator env otherwise:

- fp32: the trainer computes in fp32 and the rollouts sample from the trained weights themselves;
- bf16-rollout: the trainer computes in fp32, the rollouts sample from a bf16 copy;
- bf16: the trainer computes under bf16 autocast, the rollouts sample from a bf16 copy;

each with ``rollout_is_cap`` set, so that the truncated importance weights' mean and the
fraction at the cap are logged beside the gap (the weights change the update, not the gap).

    nice -n 10 .venv/bin/python bench/rollout_precision.py --steps 3

Prints one JSON line: per set-up the mean ``rollout_logprob_gap`` over the steps, the mean
importance weight and the fraction capped; ``ratio`` = bf16 gap / bf16-rollout gap (how much of
the gap the trainer's autocast adds to the sampler's rounding).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from pathlib import Path
from statistics import fmean
from typing import Any

from trajforge.train.config import RLConfig
from trajforge.train.rl import RLTrainer

SETUPS = {
    "fp32": {"precision": "fp32", "rollout_precision": "fp32"},
    "bf16-rollout": {"precision": "fp32", "rollout_precision": "bf16"},
    "bf16": {"precision": "bf16", "rollout_precision": "auto"},
}


def run(setup: dict[str, str], args: argparse.Namespace, out: Path) -> dict[str, float]:
    cfg = RLConfig.model_validate(
        {
            "output_dir": out,
            "model": {"spec": args.model, "precision": setup["precision"]},
            "rollout_precision": setup["rollout_precision"],
            "rollout_is_cap": args.cap,
            "env": "calculator",
            "num_tasks": 8,
            "groups_per_step": 2,
            "samples_per_group": 4,
            "steps": args.steps,
            "max_new_tokens": 32,
            "max_turns": 2,
            "optim": {"lr": 1e-3},
            "filter_zero_advantage": False,
            "tensorboard": False,
            "progress": False,
            "seed": args.seed,
        }
    )
    history = RLTrainer(cfg).train().history

    def mean_of(key: str) -> float:
        return fmean(float(h[key]) for h in history if key in h)

    return {
        "rollout_logprob_gap": mean_of("rollout_logprob_gap"),
        "rollout_logprob_gap_max": max(float(h["rollout_logprob_gap"]) for h in history),
        "rollout_is_weight_mean": mean_of("rollout_is_weight_mean"),
        "rollout_is_capped_frac": mean_of("rollout_is_capped_frac"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--cap", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, setup in SETUPS.items():
            results[name] = run(setup, args, Path(tmp) / name)
    gap = {k: v["rollout_logprob_gap"] for k, v in results.items()}
    print(
        json.dumps(
            {
                "bench": "rollout_precision",
                "model": args.model,
                "steps": args.steps,
                "cpu": platform.processor() or platform.machine(),
                **results,
                "ratio": gap["bf16"] / max(gap["bf16-rollout"], 1e-12),
            }
        )
    )


if __name__ == "__main__":
    main()
