"""Many LoRA adapters on one base model against one merged model copy per adapter.

Eight adapters (rank ``--rank`` on every linear layer, random weights) for the embedded
SmolLM2-135M-Instruct, served two ways:

- ``shared``: one ``HFPolicy`` holds the base weights once and every adapter by name
  (``add_adapter``); all requests, each naming its adapter, run as one mixed batch;
- ``copies``: each adapter merged into its own copy of the base weights, one ``HFPolicy``
  per copy, all resident; each copy's requests run as its own batch, one copy after another.

Both decode the same prompts (``bench/generation.py``'s), ``--rows`` per adapter, greedy,
end-of-sequence ignored so every row samples ``--max-new-tokens``. Memory is what each way keeps
resident: the bytes of its weights (base and fused adapters, or the copies), and the process's
resident set grown by building it. ``ratio`` is copies' weight bytes / shared's; ``speedup`` is
shared's decode rate over copies'. ``same`` is the share of rows whose tokens agree between the
two (merged weights round differently from base plus delta, so near-tied greedy tokens can flip).

Run: ``.venv/bin/python bench/multi_lora.py [--preset quick|full]``; the last line is one JSON
object.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import torch
from generation import render_prompts
from peft import LoraConfig, PeftModel, get_peft_model

from trajforge.policy import Completion, HFPolicy, SamplingParams, load_embedded

ADAPTERS = 8
PRESETS = {
    "quick": {"rows": 1, "max_new_tokens": 24, "rank": 8},
    "full": {"rows": 4, "max_new_tokens": 128, "rank": 16},
}


def rss() -> int:
    return int(psutil.Process().memory_info().rss)


def weight_bytes(model: Any) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def save_adapters(base: Any, rank: int, root: Path) -> list[Path]:
    """``ADAPTERS`` random adapters for ``base``, saved as PEFT folders; ``base`` is left as
    it was."""
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear")
    wrapped = get_peft_model(base, config)
    folders = []
    with torch.no_grad():
        for k in range(ADAPTERS):
            generator = torch.Generator().manual_seed(k)
            for name, param in wrapped.named_parameters():
                if "lora_" in name:
                    param.normal_(0, 0.02, generator=generator)
            folders.append(root / f"adapter{k}")
            wrapped.save_pretrained(folders[-1])
    wrapped.unload()
    return folders


async def decode(policy: HFPolicy, jobs: list[tuple[list[int], str | None]], n: int) -> Any:
    sampling = SamplingParams(temperature=0.0, max_new_tokens=n)
    try:
        return await asyncio.gather(
            *(policy.generate_with_adapter(a, p, sampling) for p, a in jobs)
        )
    finally:
        await policy.close()


def timed(
    policy: HFPolicy, jobs: list[tuple[list[int], str | None]], n: int
) -> tuple[list[Completion], float]:
    asyncio.run(decode(policy, jobs, 2))  # warm-up: fused weights, adapters, kernels
    start = time.perf_counter()
    done = asyncio.run(decode(policy, jobs, n))
    return done, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=PRESETS, default="quick")
    args = parser.parse_args()
    preset = PRESETS[args.preset]
    rows, n = preset["rows"], preset["max_new_tokens"]
    torch.manual_seed(0)
    base, tok = load_embedded()
    prompts = render_prompts(tok)[:rows]
    names = [f"adapter{k}" for k in range(ADAPTERS)]
    with tempfile.TemporaryDirectory() as tmp:
        folders = save_adapters(base, preset["rank"], Path(tmp))

        before = rss()
        shared = HFPolicy(base, tok, max_batch_size=ADAPTERS * rows, eos_token_ids=[])
        for name, folder in zip(names, folders, strict=True):
            shared.add_adapter(name, folder)
        shared_bytes = weight_bytes(base) + shared.adapters.nbytes
        jobs = [(p, name) for name in names for p in prompts]
        mixed, shared_s = timed(shared, jobs, n)
        shared_rss = rss() - before

        before = rss()
        copies = []
        for folder in folders:
            merged = PeftModel.from_pretrained(copy.deepcopy(base), str(folder)).merge_and_unload()
            copies.append(HFPolicy(merged, tok, max_batch_size=rows, eos_token_ids=[]))
        copies_bytes = sum(weight_bytes(c.model) for c in copies)
        alone: list[Completion] = []
        copies_s = 0.0
        for policy in copies:
            done, seconds = timed(policy, [(p, None) for p in prompts], n)
            alone += done
            copies_s += seconds
        copies_rss = rss() - before

    tokens = sum(len(c.token_ids) for c in mixed)
    same = sum(a.token_ids == b.token_ids for a, b in zip(mixed, alone, strict=True))
    result = {
        "bench": "multi_lora",
        "preset": args.preset,
        "adapters": ADAPTERS,
        "rows": ADAPTERS * rows,
        "max_new_tokens": n,
        "rank": preset["rank"],
        "shared_weights_mb": round(shared_bytes / 2**20, 1),
        "copies_weights_mb": round(copies_bytes / 2**20, 1),
        "ratio": round(copies_bytes / shared_bytes, 2),
        "shared_rss_growth_mb": round(shared_rss / 2**20, 1),
        "copies_rss_growth_mb": round(copies_rss / 2**20, 1),
        "shared_tok_s": round(tokens / shared_s, 1),
        "copies_tok_s": round(tokens / copies_s, 1),
        "speedup": round(copies_s / shared_s, 2),
        "same": round(same / len(mixed), 3),
        "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
