"""Multi-turn generation with and without reuse of the previous turn's keys and values.

An agent's every turn sends the whole history again: the previous prompt, the reply and the new
observation. Sixteen episodes (the calculator-style prompts of ``bench/generation.py``) run
``--turns`` turns concurrently through one ``HFPolicy`` each; a turn generates
``--max-new-tokens`` tokens (end-of-sequence ignored, so every mode does the same decoding) and
appends a fixed 20-odd-token tool observation. Three policies over the same weights, in one
process, each round running every mode once:

- ``baseline``: no prefix reuse, transformers forward for every prefill and decode step;
- ``no_reuse``: no prefix reuse, the lean Llama forward (``lean_decode=True``);
- ``full``: prefix reuse and the lean forward (the shipped defaults).

``ratio`` is the baseline's wall time over the full mode's. Greedy tokens are compared across
modes (``identical`` episodes).

    .venv/bin/python bench/multiturn_generation.py [--dtype bfloat16] [--turns 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import torch
from generation import gather_and_close, render_prompts

from trajforge.policy.base import SamplingParams
from trajforge.policy.hf import HFPolicy
from trajforge.policy.models.embedded import load_embedded

OBSERVATION = "<|im_end|>\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


async def episodes(
    policy: HFPolicy, prompts: list[list[int]], observation: list[int], turns: int, n: int
) -> list[list[int]]:
    sampling = SamplingParams(temperature=0.0, max_new_tokens=n)

    async def one(prompt: list[int]) -> list[int]:
        context = list(prompt)
        for _ in range(turns):
            completion = await policy.generate(context, sampling)
            context += completion.token_ids + observation
        return context

    return await gather_and_close(policy, [one(p) for p in prompts])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    model, tokenizer = load_embedded(dtype=getattr(torch, args.dtype))
    prompts = render_prompts(tokenizer)
    observation = tokenizer.encode(OBSERVATION, add_special_tokens=False)
    options: dict[str, dict[str, Any]] = {
        "baseline": {"prefix_cache_mb": 0, "lean_decode": False},
        "no_reuse": {"prefix_cache_mb": 0, "lean_decode": True},
        "full": {"prefix_cache_mb": 1024, "lean_decode": True},
    }
    policies = {
        mode: HFPolicy(model, tokenizer, max_batch_size=16, eos_token_ids=[], **kw)
        for mode, kw in options.items()
    }
    asyncio.run(episodes(policies["full"], prompts[:2], observation, 1, 4))  # warm-up
    seconds = dict.fromkeys(options, 0.0)
    contexts: dict[str, list[list[int]]] = {}
    for _ in range(args.rounds):
        for mode, policy in policies.items():
            start = time.perf_counter()
            contexts[mode] = asyncio.run(
                episodes(policy, prompts, observation, args.turns, args.max_new_tokens)
            )
            elapsed = time.perf_counter() - start
            seconds[mode] += elapsed
            print(f"{mode}: {elapsed:.1f}s", file=sys.stderr)
    stats = {
        mode: {
            "prefill_tokens": p.stats.prefill_tokens,
            "reused_tokens": p.stats.reused_tokens,
            "decode_steps": p.stats.decode_steps,
        }
        for mode, p in policies.items()
    }
    result = {
        "bench": "multiturn_generation",
        "model": f"SmolLM2-135M-Instruct ({args.dtype}, CPU)",
        "episodes": len(prompts),
        "turns": args.turns,
        "max_new_tokens": args.max_new_tokens,
        "rounds": args.rounds,
        "seconds": {mode: round(s, 2) for mode, s in seconds.items()},
        "engine": stats,
        "identical": {
            mode: sum(a == b for a, b in zip(contexts[mode], contexts["baseline"], strict=True))
            for mode in options
        },
        "no_reuse_vs_baseline": round(seconds["baseline"] / seconds["no_reuse"], 2),
        "ratio": round(seconds["baseline"] / seconds["full"], 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
