"""One RL step of the main job, on the fast logprob path and on the reference path, side by side.

The configuration is the ``rl`` stage of examples/calculator/experiment.yaml (8 groups x 4
samples, two passes over them, GRPO, PPO-clip, LoRA r16 on its 10 layers, 64 new tokens a turn,
4 turns), read from the file, with ``filter_zero_advantage`` off so that every group trains
whatever its rewards (the base model rarely solves a task, and a step's cost is the same for any
advantages). Two trainers start from the same weights and seed:

- new: the defaults (a micro-batch's common prefix, the system prompt and a group's prompt, run
  once in training and prefilled once in sampling; with more than one pass, old logprobs from
  the first pass's own forward);
- reference: ``reference_path: true`` (every prompt prefilled whole, every row's full forward;
  a separate old-logprob pass before several passes).

Each trainer samples the step's rollouts with its own rollout policy (the same weights and
seeds; the reference prefills every prompt whole, the new one prefills what prompts admitted
together begin with once), timed; ``same_tokens`` is the fraction of episodes whose sampled
tokens agree between the two. Both trainers then train on copies of the new one's rollouts, so
training is compared on identical token ids. Training is the rest of ``run_step`` (scoring,
advantages, the forward and backward passes, the optimizer step, the rollout copy's refresh);
the two paths take turns to sample and to train first.

    nice -n 10 .venv/bin/python bench/rl_step.py --model embedded --precision fp32
    nice -n 10 .venv/bin/python bench/rl_step.py --model embedded --precision bf16

Prints one JSON line: ``ratio`` = (reference sampling + training) / (new sampling + training),
the cost of a whole step; ``train_ratio`` and ``sampling_ratio`` the same for each part alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from trajforge.schema import Role, Task, Trajectory
from trajforge.train.config import RLConfig
from trajforge.train.rl import RLTrainer

EXPERIMENT = Path(__file__).parents[1] / "examples" / "calculator" / "experiment.yaml"


def rl_stage(
    model: str,
    precision: str,
    epochs: int | None,
    reference: bool,
    out: Path,
    experiment_file: Path = EXPERIMENT,
) -> RLConfig:
    """The experiment's ``rl`` stage as a one-run config (the tiny model's 2 layers get LoRA on
    both instead of the embedded model's top 10; ``epochs`` None keeps the job's)."""
    experiment = yaml.safe_load(experiment_file.read_text())
    stage = next(s for s in experiment["stages"] if s["kind"] == "rl")
    settings: dict[str, Any] = dict(stage["train"])
    lora = dict(settings.get("model", {}).get("lora", {}))
    if model == "tiny":
        lora.pop("layers", None)
    settings.update(
        env=experiment["env"],
        seed=experiment["seed"],
        model={"spec": model, "precision": precision, "lora": lora or None},
        output_dir=out,
        epochs_per_step=epochs or settings.get("epochs_per_step", 1),
        filter_zero_advantage=False,
        validation={"tasks": 0},
        reference_path=reference,
        tensorboard=False,
        progress=False,
        checkpoint_every=0,
    )
    return RLConfig.model_validate(settings)


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo (the architecture elsewhere)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.machine()


def replaying(trajs: list[Trajectory]) -> Callable[[int, list[Task]], list[Trajectory]]:
    """A trainer's rollout function handing out copies of ``trajs`` (training adds scores)."""
    return lambda _step, _tasks: [t.model_copy(deep=True) for t in trajs]


def sampled_tokens(traj: Trajectory) -> list[list[int]]:
    """The token ids of each assistant turn of ``traj``."""
    return [list(m.token_ids or []) for m in traj.messages if m.role is Role.ASSISTANT]


def training_seconds(trainer: RLTrainer, step: int) -> tuple[float, float]:
    """Seconds of ``trainer``'s step past its (replayed) rollouts, and its loss tokens."""
    metrics = trainer.run_step(step)
    return metrics["step_time_s"] - metrics["rollout_time_s"], metrics.get("loss_tokens", 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        default="tiny",
        help="tiny, embedded, pocket or a model folder (an SFT checkpoint)",
    )
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--epochs", type=int, help="epochs_per_step (default: the job's, 2)")
    parser.add_argument("--repeats", type=int, default=1, help="steps timed")
    parser.add_argument("--experiment", type=Path, default=EXPERIMENT, help="the experiment whose rl stage runs (default: the main job's; examples/keydoor/experiment.yaml: the long-horizon preset)")  # fmt: skip
    args = parser.parse_args()
    sampling: dict[str, list[float]] = {"reference": [], "new": []}
    training: dict[str, list[float]] = {"reference": [], "new": []}
    same: list[bool] = []
    tokens = {"reference": 0.0, "new": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {
            name: RLTrainer(
                rl_stage(
                    args.model,
                    args.precision,
                    args.epochs,
                    name == "reference",
                    Path(tmp) / name,
                    args.experiment,
                )
            )
            for name in training
        }
        for step in range(1, args.repeats + 1):
            # Turns at going first, so that neither path always meets the busier CPU.
            order = list(training)[:: 1 if step % 2 else -1]
            sampled = {}
            for name in order:
                start = time.perf_counter()
                sampled[name] = trainers[name]._rollout(step, trainers[name]._next_tasks()[0])
                sampling[name].append(time.perf_counter() - start)
            same += [
                sampled_tokens(a) == sampled_tokens(b)
                for a, b in zip(sampled["reference"], sampled["new"], strict=True)
            ]
            for name in order:
                trainers[name]._rollout = replaying(sampled["new"])  # type: ignore[method-assign]
                seconds, loss_tokens = training_seconds(trainers[name], step)
                training[name].append(seconds)
                tokens[name] += loss_tokens
    sample_s = {name: sum(v) / len(v) for name, v in sampling.items()}
    train_s = {name: sum(v) / len(v) for name, v in training.items()}
    step_s = {name: sample_s[name] + t for name, t in train_s.items()}
    print(
        json.dumps(
            {
                "bench": "rl_step",
                "experiment": str(args.experiment),
                "model": args.model,
                "precision": args.precision,
                "epochs_per_step": trainers["new"].rl_cfg.epochs_per_step,
                "repeats": args.repeats,
                "cpu": cpu_name(),
                "cpus": os.cpu_count(),
                "sampling_s": {name: round(t, 2) for name, t in sample_s.items()},
                "same_tokens": round(sum(same) / len(same), 3),
                "training_s": {name: round(t, 2) for name, t in train_s.items()},
                "step_s": {name: round(t, 2) for name, t in step_s.items()},
                "loss_tokens": tokens,
                "sampling_ratio": round(sample_s["reference"] / sample_s["new"], 3),
                "train_ratio": round(train_s["reference"] / train_s["new"], 3),
                "ratio": round(step_s["reference"] / step_s["new"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
