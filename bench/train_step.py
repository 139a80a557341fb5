"""SFT step throughput: trajforge's SFTTrainer vs TRL's SFTTrainer on SmolLM2-135M, side by side.

Both train on the same scripted-expert ``calculator`` trajectories (the same token ids, the loss
on assistant tokens only), with the same micro-batch size, optimizer (AdamW), learning rate,
gradient clipping and precision (fp32, full fine-tuning or the same LoRA). Time is the sum of
the optimizer steps' wall time (model loading, dataset preparation and saving excluded), and
throughput is trainable (assistant) tokens per second. ``ratio`` = ours / TRL.

    .venv/bin/python bench/train_step.py [--steps 6] [--batch 4] [--repeats 1] [--lora]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def run_ours(trajs: list[Any], args: argparse.Namespace, out: Path) -> dict[str, float]:
    from trajforge.train.config import LoraSettings, ModelSettings, OptimSettings, SFTConfig
    from trajforge.train.sft import SFTTrainer

    cfg = SFTConfig(
        output_dir=out,
        model=ModelSettings(
            spec="embedded",
            precision="fp32",
            lora=LoraSettings(r=16, alpha=32, target_modules=LORA_TARGETS) if args.lora else None,
        ),
        optim=OptimSettings(lr=1e-5, max_grad_norm=1.0),
        batch_size=args.batch,
        micro_batch_rows=args.batch,
        micro_batch_tokens=args.batch * 4096,
        max_steps=args.steps,
        epochs=100,
        tensorboard=False,
        progress=False,
    )
    trainer = SFTTrainer(cfg, trajs)
    steps: list[dict[str, float]] = []
    t_total = 0.0
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        metrics = trainer.run_step(step)
        t_total += time.perf_counter() - t0
        steps.append(metrics)
    loss_tokens = sum(m["loss_tokens"] for m in steps)
    tokens = sum(m["tokens"] for m in steps)
    return {
        "time_s": t_total,
        "loss_tokens": loss_tokens,
        "tokens": tokens,
        "tokens_per_s": loss_tokens / t_total,
        "first_loss": steps[0]["loss"],
        "padding_fraction": sum(m["padding_fraction"] for m in steps) / len(steps),
    }


def run_trl(trajs: list[Any], args: argparse.Namespace, out: Path) -> dict[str, float]:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from trajforge.policy.models.embedded import load_embedded
    from trajforge.train.batch import encode_trajectory
    from trajforge.train.sft import epoch_order

    model, tok = load_embedded(dtype=torch.float32)
    seqs = [encode_trajectory(t) for t in trajs]
    # The same order our trainer uses for its first epoch, so each step sees the same sequences.
    order = epoch_order(len(seqs), 0, 0)
    rows = [
        {"input_ids": seqs[i].input_ids, "assistant_masks": [int(b) for b in seqs[i].loss_mask]}
        for i in order
    ]
    dataset = Dataset.from_list(rows[: args.steps * args.batch])
    peft_config = None
    if args.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=16, lora_alpha=32, target_modules=LORA_TARGETS, task_type="CAUSAL_LM"
        )
    config = SFTConfig(
        output_dir=str(out),
        per_device_train_batch_size=args.batch,
        gradient_accumulation_steps=1,
        max_steps=args.steps,
        learning_rate=1e-5,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_length=None,
        logging_steps=10_000,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,
        fp16=False,
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
    )
    step_times: list[float] = []

    class Timer(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self.t0 = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            step_times.append(time.perf_counter() - self.t0)

    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        processing_class=tok,
        peft_config=peft_config,
        callbacks=[Timer()],
    )
    # Keep the dataset order, so both trainers see the same micro-batches.
    trainer._get_train_sampler = lambda *a, **k: torch.utils.data.SequentialSampler(dataset)
    trainer.train()
    used = rows[: args.steps * args.batch]
    loss_tokens = sum(sum(r["assistant_masks"]) for r in used)
    # A step's first assistant token has no label shift issue: both count the assistant tokens.
    total = sum(step_times)
    return {
        "time_s": total,
        "loss_tokens": float(loss_tokens),
        "tokens": float(sum(len(r["input_ids"]) for r in used)),
        "tokens_per_s": loss_tokens / total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--lora", action="store_true")
    args = parser.parse_args()

    from trajforge.policy.models.smollm2 import load_tokenizer
    from trajforge.train.data import expert_trajectories

    trajs = expert_trajectories("calculator", args.steps * args.batch, load_tokenizer(), seed=0)
    ours: list[dict[str, float]] = []
    trl: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            ours.append(run_ours(trajs, args, Path(tmp) / f"ours{r}"))
            trl.append(run_trl(trajs, args, Path(tmp) / f"trl{r}"))
    best_ours = max(ours, key=lambda m: m["tokens_per_s"])
    best_trl = max(trl, key=lambda m: m["tokens_per_s"])
    print(
        json.dumps(
            {
                "bench": "train_step",
                "model": "SmolLM2-135M-Instruct",
                "mode": "lora-r16" if args.lora else "full",
                "steps": args.steps,
                "micro_batch": args.batch,
                "sequences": len(trajs),
                "loss_tokens": best_ours["loss_tokens"],
                "tokens": best_ours["tokens"],
                "ours_tokens_per_s": round(best_ours["tokens_per_s"], 1),
                "trl_tokens_per_s": round(best_trl["tokens_per_s"], 1),
                "ours_time_s": round(best_ours["time_s"], 2),
                "trl_time_s": round(best_trl["time_s"], 2),
                "ours_padding_fraction": round(best_ours["padding_fraction"], 3),
                "ratio": round(best_ours["tokens_per_s"] / best_trl["tokens_per_s"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
