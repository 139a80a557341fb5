"""A training step through the Tinker API (``trajforge serve --tinker``, driven by the tinker SDK)
against the same step in process: what the API costs.

Both sides train the same LoRA model from the same weights on the same batch (8 sequences of
256 random tokens, ``cross_entropy``, AdamW). The API side is the real server on 127.0.0.1 with
the SDK's ``forward_backward(...).result()`` and ``optim_step(...).result()``; the in-process side
calls the server's own ``TrainingModel`` directly, so the difference is the wire, the futures and
the polling. Steps alternate between the two sides, so a shift in the machine's load hits both.

    .venv/bin/python bench/tinker_api.py --model embedded
    .venv/bin/python bench/tinker_api.py --model tiny --steps 5

Then ``--clients`` more training clients (rank ``--rank`` each) are created through the SDK
and the memory they take is reported: every client's adapter sits on one copy of the base
weights (``tinker/shared_base.py``), against a copy per client as before: ``memory_ratio`` is
the copies' weight bytes (base and adapter per client) over the shared model's, beside the
process's resident-set growth while the clients were created. ``--steps 0`` measures memory
alone.

Prints one JSON line; ``ratio`` is in-process seconds per step over API seconds per step
(target >= 0.8).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

import tinker
from tinker import types
from trajforge.serve.server import serving_app
from trajforge.tinker.app import tinker_app
from trajforge.tinker.service import TinkerService
from trajforge.tinker.trainer import LoraSpec, TrainingModel
from trajforge.tinker.wire import Datum


def batch(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, length + 1).tolist() for _ in range(n)]


def client_memory(
    service: TinkerService, client: tinker.ServiceClient, args: Any
) -> dict[str, Any]:
    """Resident-set growth and weight bytes of ``args.clients`` new training clients."""
    process = psutil.Process()
    before = process.memory_info().rss
    for seed in range(args.clients):
        client.create_lora_training_client(
            base_model=args.model, rank=args.rank, seed=seed
        ).result()
    grown = process.memory_info().rss - before
    (shared,) = service.bases.values()
    named = {p.data_ptr(): (n, p) for n, p in shared.model.named_parameters()}.values()
    adapter = sum(p.numel() * p.element_size() for n, p in named if "lora_" in n)
    shared_bytes = sum(p.numel() * p.element_size() for _, p in named)
    base = shared_bytes - adapter
    copies = shared.clients * base + adapter
    return {"clients_on_base": shared.clients, "clients_rss_growth_mb": round(grown / 2**20, 1),
            "shared_weights_mb": round(shared_bytes / 2**20, 1),
            "copies_weights_mb": round(copies / 2**20, 1),
            "memory_ratio": round(copies / shared_bytes, 2)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded", help="tiny or embedded")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--seqs", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side (0: none)")
    parser.add_argument("--clients", type=int, default=4, help="training clients for memory")
    args = parser.parse_args()

    seqs = batch(args.seqs, args.tokens, 49152, seed=0)
    sdk_data = [
        types.Datum(
            model_input=types.ModelInput.from_ints(s[:-1]),
            loss_fn_inputs={
                "target_tokens": np.array(s[1:], dtype=np.int64),
                "weights": np.ones(args.tokens, dtype=np.float32),
            },
        )
        for s in seqs
    ]
    local_data = [
        Datum(
            tokens=s[:-1],
            inputs={
                "target_tokens": np.array(s[1:], dtype=np.int64),
                "weights": np.ones(args.tokens, dtype=np.float32),
            },
        )
        for s in seqs
    ]
    adam = types.AdamParams(learning_rate=1e-4)
    api_s: list[float] = []
    local_s: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        service = TinkerService(Path(tmp), {args.model: args.model}, store=None)
        local = TrainingModel("local", args.model, args.model, LoraSpec(rank=args.rank, seed=0))
        with serving_app(tinker_app(service)) as url:
            client = tinker.ServiceClient(base_url=url, api_key="tml-local")
            trainer = client.create_lora_training_client(
                base_model=args.model, rank=args.rank, seed=0
            ).result()

            def api_step() -> float:
                out = trainer.forward_backward(sdk_data, "cross_entropy").result()
                trainer.optim_step(adam).result()
                return float(out.metrics["loss:sum"])

            def local_step() -> float:
                out = local.forward_backward(local_data, "cross_entropy", {}, backward=True)
                local.optim_step(adam.learning_rate, (adam.beta1, adam.beta2), adam.eps, 0.0, 0.0)
                return out.metrics["loss:sum"]

            losses = []
            for _ in range(args.steps):
                if not losses:
                    api_step(), local_step()  # warm-up: first-call allocations on both sides
                start = time.perf_counter()
                api_loss = api_step()
                api_s.append(time.perf_counter() - start)
                start = time.perf_counter()
                local_loss = local_step()
                local_s.append(time.perf_counter() - start)
                losses.append((api_loss, local_loss))
            memory = client_memory(service, client, args)
    api = statistics.median(api_s) if api_s else None
    in_process = statistics.median(local_s) if local_s else None
    print(
        json.dumps(
            {
                "bench": "tinker_api",
                "model": args.model,
                "rank": args.rank,
                "batch": f"{args.seqs}x{args.tokens}",
                "steps": args.steps,
                "cpus": os.cpu_count(),
                "api_s_per_step": api and round(api, 3),
                "in_process_s_per_step": in_process and round(in_process, 3),
                "api_steps_s": [round(s, 3) for s in api_s],
                "in_process_steps_s": [round(s, 3) for s in local_s],
                "same_losses": all(abs(a - b) <= 1e-3 * abs(b) for a, b in losses),
                "ratio": round(in_process / api, 3) if api and in_process else None,
                **memory,
            }
        )
    )


if __name__ == "__main__":
    main()
