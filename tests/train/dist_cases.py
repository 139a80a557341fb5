"""Training cases run alike in one process and under a launcher with several (``torchrun``).

As a script (``python -m torch.distributed.run ... dist_cases.py SPEC.json``) every process
trains each case of the spec and the main process saves the whole trained weights to
``<out>/<name>.pt``; ``train_case`` is what a test calls in its own process to compare.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch
from train_helpers import qa_trajectory, small_rl_config, token_id_rubric

from trajforge.curate import preference_pairs
from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.train.base import Trainer
from trajforge.train.config import DPOConfig, SFTConfig
from trajforge.train.distributed import leave_process_group
from trajforge.train.dpo import DPOTrainer
from trajforge.train.rl import RLTrainer
from trajforge.train.sft import SFTTrainer


def sft_data() -> list[Any]:
    tok = tiny_model_and_tokenizer()[1]
    return [
        qa_trajectory(
            tok,
            f"What is {a} plus {b}?",
            f"The answer is {a + b}." + " Sure." * (a % 3),
            tool_result=f"{a + b}" if a % 2 else None,
        )
        for a, b in [(1, 2), (3, 4), (5, 6), (7, 8), (9, 1), (2, 2)]
    ]


def dpo_pairs() -> list[Any]:
    tok = tiny_model_and_tokenizer()[1]
    trajs = []
    for a in range(3):
        q = f"What is {a} plus 1?"
        trajs.append(qa_trajectory(tok, q, f"The answer is {a + 1}.", group_id=f"g{a}", reward=1.0))
        trajs.append(
            qa_trajectory(tok, q, "I do not know." * (a + 1), group_id=f"g{a}", reward=0.0)
        )
    return preference_pairs(trajs, min_margin=0.5)


# AdamW turns a gradient error dg into an update error of at most LR * dg / ADAM_EPS (the slope
# of g / (|g| + eps) at g = 0). At the default eps (1e-8) a gradient element near zero amplifies
# fp32 summation-order noise (a few ulps) into 1e-5 of the weights, more or less by CPU kind;
# at 1e-4 the equivalence tests compare a well-conditioned step (see ``step_tolerance``).
LR = 1e-3
ADAM_EPS = 1e-4


def common(case: dict[str, Any], out: Path) -> dict[str, Any]:
    lora = {"r": 4, "alpha": 8} if case.get("lora") else None
    return {
        "output_dir": out,
        "model": {"spec": "tiny", "lora": lora, "precision": "fp32"},
        "optim": {"lr": LR, "max_grad_norm": 1.0, "eps": ADAM_EPS},
        "micro_batch_tokens": 160,
        "tensorboard": False,
        "progress": False,
        "checkpoint_every": case.get("checkpoint_every", 0),
        "distributed": {
            "strategy": case.get("strategy", "ddp"),
            "timeout_s": case.get("timeout_s", 60),
        },
    }


def make_trainer(case: dict[str, Any], out: Path, callbacks: Any = ()) -> Trainer:
    """The trainer of ``case``: ``kind`` (sft, dpo, rl), ``lora``, ``strategy``, ``steps``, and
    for RL ``rl`` (more RL settings)."""
    settings = common(case, out)
    steps = case.get("steps", 1)
    if case["kind"] == "sft":
        cfg = SFTConfig.model_validate({**settings, "batch_size": 6, "epochs": steps})
        return SFTTrainer(cfg, sft_data(), callbacks=callbacks)
    if case["kind"] == "dpo":
        dcfg = DPOConfig.model_validate({**settings, "batch_size": 3, "epochs": steps, "beta": 0.5})
        return DPOTrainer(dcfg, dpo_pairs(), callbacks=callbacks)
    store = case.get("store")
    rl = {"kl_coef": 0.1, "max_new_tokens": 6, **case.get("rl", {})}
    rcfg = small_rl_config(out, **settings, steps=steps, store=store, **rl)
    return RLTrainer(rcfg, rubric=token_id_rubric(), callbacks=callbacks)


# A rank's gradient scaled by this factor: the faults the equivalence tests must catch.
FAULTS = {"rank1-gradient-doubled": 2.0, "rank1-gradient-dropped": 0.0}


def inject_fault(trainer: Trainer, factor: float) -> None:
    """Scale this process's share of every backward pass by ``factor``."""
    backward = trainer.backward

    def faulty(loss: torch.Tensor, *, last: bool) -> None:
        backward(loss * factor, last=last)

    trainer.backward = faulty  # type: ignore[method-assign]


def train_case(case: dict[str, Any], out: Path, *, resume: bool = False) -> dict[str, torch.Tensor]:
    """Train ``case`` into ``out``; the whole weights (on the main process; {} elsewhere)."""
    kill_at = case.get("kill_rank_at_step")

    def kill(step: int, metrics: dict[str, float]) -> None:
        if kill_at is not None and step == kill_at and os.environ.get("RANK") == "1":
            os.kill(os.getpid(), signal.SIGKILL)

    trainer = make_trainer(case, out, callbacks=[kill])
    if case.get("fault") and os.environ.get("RANK") == "1":
        inject_fault(trainer, FAULTS[case["fault"]])
    trainer.train(resume=resume)
    return trainer.parts.full_state(on_all=False)


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["out"])
    for case in spec["cases"]:
        state = train_case(case, out / case["name"], resume=case.get("resume", False))
        if os.environ.get("RANK", "0") == "0":
            torch.save(state, out / f"{case['name']}.pt")
    leave_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
