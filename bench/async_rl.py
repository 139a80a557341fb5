"""Asynchronous RL (staleness 1) against synchronous RL: wall time per step, same step count.

Both runs train the same model from the same weights on the same calculator tasks with the same
seed and settings (GRPO, PPO-clip, LoRA on the embedded model or full fine-tuning on the tiny
one); the only difference is ``async_staleness``. Synchronous: each step samples its groups,
then trains on them. Asynchronous: the next step's groups are sampled on a thread, from a copy
of the weights one update old, while this step trains. The reward curve of each run is printed
beside its time, so a speed-up bought with learning would show.

    .venv/bin/python bench/async_rl.py --model tiny
    .venv/bin/python bench/async_rl.py --model runs/calculator/sft/final --steps 4

A model that never solves a task (the tiny one, SmolLM2 before SFT) gets no advantage, so its
updates are skipped and only the sampling is timed; the demo's SFT checkpoint (``make demo``)
solves some and trains every step.

Prints one JSON line; ``ratio`` is synchronous seconds per step over asynchronous (target >= 1.3).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from trajforge.train.config import RLConfig
from trajforge.train.rl import RLTrainer


def _config(out: Path, model: str, steps: int, staleness: int) -> RLConfig:
    settings: dict[str, Any] = {
        "output_dir": out,
        "env": "calculator",
        "model": {"spec": model, **({} if model == "tiny" else {"lora": {"r": 16}})},
        "num_tasks": 32,
        "groups_per_step": 4,
        "samples_per_group": 4,
        "steps": steps,
        "max_new_tokens": 48,
        "max_turns": 3,
        "seed": 0,
        "async_staleness": staleness,
        "tensorboard": False,
        "progress": False,
        "checkpoint_every": 0,
    }
    return RLConfig.model_validate(settings)


def _run(model: str, steps: int, staleness: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        trainer = RLTrainer(_config(Path(tmp), model, steps, staleness))
        start = time.perf_counter()
        result = trainer.train()
        seconds = time.perf_counter() - start
    return {
        "s_per_step": round(seconds / steps, 2),
        "reward_curve": [round(h["reward_mean"], 3) for h in result.history],
        "trained_trajectories": [h.get("trained_trajectories", 0.0) for h in result.history],
        # Synchronous: sampling time per step; asynchronous: the wait for rollouts sampled
        # while the previous step trained.
        "rollout_s_per_step": round(
            sum(h["rollout_time_s"] for h in result.history) / len(result.history), 2
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", help="tiny, embedded or a model folder")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    synchronous = _run(args.model, args.steps, staleness=0)
    asynchronous = _run(args.model, args.steps, staleness=1)
    print(
        json.dumps(
            {
                "bench": "async_rl",
                "model": args.model,
                "steps": args.steps,
                "cpus": os.cpu_count(),
                "synchronous": synchronous,
                "asynchronous": asynchronous,
                "ratio": round(synchronous["s_per_step"] / asynchronous["s_per_step"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
