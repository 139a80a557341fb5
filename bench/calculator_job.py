"""The calculator job (``examples/calculator/experiment.yaml``) as the benches that compare RL
arms from one SFT checkpoint use it: the job, its micro preset on the tiny model, and its
stages up to SFT run once."""

from __future__ import annotations

from pathlib import Path

from trajforge.pipeline.config import EvalStage, Experiment, RLStage, SFTStage
from trajforge.pipeline.runner import ExperimentRunner

JOB = Path(__file__).resolve().parents[1] / "examples" / "calculator" / "experiment.yaml"
# The tiny random model at micro sizes: proves a bench end to end in minutes (it solves
# nothing, so arms compared on it tie).
QUICK = [
    "model=tiny",
    "stages.demonstrations.tasks=8",
    "stages.sft.train.epochs=1",
    "stages.sft.train.max_steps=2",
    "stages.sft.train.batch_size=4",
    "stages.rl.train.model.lora.layers=[0, 1]",
    "stages.rl.train.num_tasks=16",
    "stages.rl.train.groups_per_step=2",
    "stages.rl.train.samples_per_group=2",
    "stages.rl.train.max_turns=2",
    "stages.rl.train.max_new_tokens=16",
    "stages.rl.train.epochs_per_step=1",
    "stages.rl.train.validation.tasks=4",
]
# The held-out eval at micro sizes, beside QUICK, for the benches that play it.
QUICK_EVAL = ["eval.tasks=8", "eval.max_turns=2", "eval.max_new_tokens=16"]


def rl_index(exp: Experiment) -> int:
    """The position of the job's first RL stage."""
    return next(i for i, s in enumerate(exp.stages) if isinstance(s, RLStage))


def sft_model(exp: Experiment, out: Path) -> str:
    """The job's stages before its RL stage, evals left out (only the checkpoint is used), run
    once in ``out/sft``; the SFT checkpoint they end on."""
    stages = [s for s in exp.stages[: rl_index(exp)] if not isinstance(s, EvalStage)]
    sft = [s.name for s in stages if isinstance(s, SFTStage)][-1]
    prefix = exp.model_copy(update={"stages": stages})
    results = ExperimentRunner(prefix, run_dir=out / "sft").run()
    return str(next(s["model"] for s in results["stages"] if s["name"] == sft))
