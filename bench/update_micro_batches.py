"""The forward and backward of one RL step's episodes at several micro-batch token budgets.

An RL update pads each micro-batch to its longest row. On keydoor-compact a step mixes short
wins (~160 tokens) with 16-turn failures (~630), so one 32,768-token micro-batch of 64 episodes
is a quarter padding, and its wide attention costs more again; small budgets bucket rows of
like length. The episodes are a stored RL step's (a run folder of ``bench/credit_assignment.py
--out``), the model the checkpoint it trained from; each budget runs the trainer's own
``micro_batches`` and ``TokenLogprobModel`` (logprobs and entropy, then backward), the budgets in
turn, ``--repeats`` times, and the median counts.

    nice -n 10 .venv/bin/python bench/update_micro_batches.py \
        --store runs/credit/keydoor-cpu-gigpo-s0/store.db --model runs/credit/keydoor-cpu/sft/final

Prints one JSON line: ``ratio`` = the first budget's median seconds / the fastest budget's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from trajforge.store.sqlite import TrajectoryStore
from trajforge.train.batch import (
    TokenSequence,
    encode_trajectory,
    micro_batches,
    padding_fraction,
    plan_micro_batches,
)
from trajforge.train.logprobs import TokenLogprobModel


def _step_sequences(store: Path, run_id: str | None) -> tuple[str, list[TokenSequence]]:
    """The token sequences of ``run_id``'s episodes (default: the RL step with the most)."""
    with TrajectoryStore(store) as st:
        trajs = [t for t in st.query() if t.is_tokenized and t.num_turns > 0]
    counts = Counter(t.run_id for t in trajs if t.run_id and "-step" in t.run_id)
    chosen = run_id or (counts.most_common(1)[0][0] if counts else None)
    seqs = [encode_trajectory(t) for t in trajs if t.run_id == chosen]
    if chosen is None or not seqs:
        raise SystemExit(f"{store}: no RL step's episodes (run id {run_id or 'any *-step*'})")
    return chosen, seqs


def _pass(model: TokenLogprobModel, seqs: list[TokenSequence], budget: int, pad: int) -> float:
    """Seconds for one epoch's forward and backward over ``seqs`` at ``budget`` tokens."""
    started = time.perf_counter()
    for b in micro_batches(seqs, max_tokens=budget, pad_token_id=pad):
        lp, _ = model(b.input_ids, b.attention_mask, b.loss_mask, True, 1.0)
        (lp.sum() / max(b.num_loss_tokens, 1)).backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="an RL run's store.db")
    parser.add_argument("--model", type=Path, required=True, help="the checkpoint folder")
    parser.add_argument("--run-id", default=None, help="the step's run id (default: the largest)")
    parser.add_argument("--budgets", type=int, nargs="+", default=[32768, 8192, 4096, 2048])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    run_id, seqs = _step_sequences(args.store, args.run_id)
    lm = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    pad = int(lm.config.pad_token_id if lm.config.pad_token_id is not None else 0)
    model = TokenLogprobModel(lm).train()
    _pass(model, seqs, args.budgets[-1], pad)  # warm-up: allocator and kernels
    times: dict[int, list[float]] = {b: [] for b in args.budgets}
    for _ in range(args.repeats):
        for budget in args.budgets:
            times[budget].append(_pass(model, seqs, budget, pad))
    lengths = [len(s) for s in seqs]
    rows: dict[int, dict[str, Any]] = {}
    medians = {b: statistics.median(seconds) for b, seconds in times.items()}
    for budget, seconds in times.items():
        plan = plan_micro_batches(lengths, max_tokens=budget)
        rows[budget] = {
            "median_s": round(medians[budget], 3),
            "all_s": [round(s, 3) for s in seconds],
            "micro_batches": len(plan),
            "padding": round(padding_fraction(lengths, plan), 3),
        }
        print(f"  budget {budget:>6}: {rows[budget]}")
    fastest = min(medians.values())
    print(
        json.dumps(
            {
                "bench": "update_micro_batches",
                "run_id": run_id,
                "episodes": len(seqs),
                "tokens": sum(lengths),
                "loss_tokens": sum(s.num_loss_tokens for s in seqs),
                "budgets": rows,
                "cpu": platform.processor() or platform.machine(),
                "cpus": os.cpu_count(),
                "torch_threads": torch.get_num_threads(),
                "ratio": round(medians[args.budgets[0]] / fastest, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
