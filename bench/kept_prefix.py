"""Episodes that start one at a time, with and without the shared beginnings earlier batches kept.

An eval runs as many episodes at once as it has browsers (or slots); after the first batch, each
new episode's first prompt arrives alone, when another episode ends, and the prompts admitted
together that share prefill (``engine.shared_prefix``) are rarely more than one. Every such
prompt begins with the env's system prompt: on the web job 716 of its ~980 tokens. Here
``--episodes`` first prompts of that shape (a ~700-token system prompt with the tool list, then
each episode's own ~250-token page) run ``--concurrency`` at a time through SmolLM2, each
generating ``--max-new-tokens`` tokens, under two policies over the same weights in one process,
each round running both:

- ``batch_only``: prompts share only with prompts admitted together (no kept parts);
- ``kept``: a prompt admitted later starts from the parts earlier batches shared (the default).

``ratio`` is ``batch_only``'s wall time over ``kept``'s; greedy tokens are compared
(``identical`` episodes: equal up to float rounding, which can flip a near-tie).

    .venv/bin/python bench/kept_prefix.py [--dtype bfloat16] [--episodes 48] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from typing import Any

import torch
from generation import gather_and_close

from trajforge.policy.base import SamplingParams
from trajforge.policy.hf import HFPolicy
from trajforge.policy.models.embedded import load_embedded

ACTIONS = ("click", "fill", "select_option", "press", "scroll", "hover", "check", "done")
WORDS = ("button", "link", "textbox", "checkbox", "submit", "label", "option", "heading")


def system_prompt() -> str:
    """A tool list the size of the web job's (eight actions, a JSON schema each)."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"{name.replace('_', ' ').capitalize()} on the element whose "
                "bid is given, as shown in brackets in the page's accessibility tree. "
                "Fails with a one-line error when no element has that bid.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "bid": {"type": "string", "description": "the element's id"},
                        "value": {"type": "string", "description": "text, key or option"},
                    },
                    "required": ["bid"],
                },
            },
        }
        for name in ACTIONS
    ]
    return "You are a web agent. Complete the task on the page.\n" + json.dumps(tools)


def page(rng: random.Random) -> str:
    """An accessibility tree of ~250 tokens, different in every episode."""
    lines = [f"Task: click the {rng.choice(WORDS)} labelled {rng.randrange(1000)}."]
    for bid in range(24):
        lines.append(f"[{bid}] {rng.choice(WORDS)} '{rng.choice(WORDS)} {rng.randrange(100)}'")
    return "\n".join(lines)


def render(tokenizer: Any, episodes: int) -> list[list[int]]:
    rng = random.Random(0)
    prompts = []
    for _ in range(episodes):
        messages = [
            {"role": "system", "content": system_prompt()},
            {"role": "user", "content": page(rng)},
        ]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
    return prompts


async def staggered(
    policy: HFPolicy, prompts: list[list[int]], concurrency: int, n: int
) -> list[list[int]]:
    """Every prompt to the end, at most ``concurrency`` at once: a new one starts as one ends."""
    sampling = SamplingParams(temperature=0.0, max_new_tokens=n)
    slots = asyncio.Semaphore(concurrency)

    async def one(prompt: list[int]) -> list[int]:
        async with slots:
            return (await policy.generate(prompt, sampling)).token_ids

    return await gather_and_close(policy, [one(p) for p in prompts])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--episodes", type=int, default=48)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=44)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    model, tokenizer = load_embedded(dtype=getattr(torch, args.dtype))
    prompts = render(tokenizer, args.episodes)
    policies = {
        mode: HFPolicy(model, tokenizer, max_batch_size=args.concurrency, eos_token_ids=[])
        for mode in ("batch_only", "kept")
    }
    cache = policies["batch_only"].prefix_cache
    assert cache is not None
    cache.max_shared = 0
    asyncio.run(staggered(policies["kept"], prompts[:2], 2, 4))  # warm-up
    seconds = dict.fromkeys(policies, 0.0)
    outputs: dict[str, list[list[int]]] = {}
    for _ in range(args.rounds):
        for mode, policy in policies.items():
            # Every round starts as an eval does, with nothing kept.
            if policy.prefix_cache is not None:
                policy.prefix_cache.clear()
            start = time.perf_counter()
            outputs[mode] = asyncio.run(
                staggered(policy, prompts, args.concurrency, args.max_new_tokens)
            )
            elapsed = time.perf_counter() - start
            seconds[mode] += elapsed
            print(f"{mode}: {elapsed:.1f}s", file=sys.stderr)
    result = {
        "bench": "kept_prefix",
        "model": f"SmolLM2-135M-Instruct ({args.dtype}, CPU)",
        "episodes": len(prompts),
        "prompt_tokens": round(sum(len(p) for p in prompts) / len(prompts)),
        "concurrency": args.concurrency,
        "max_new_tokens": args.max_new_tokens,
        "rounds": args.rounds,
        "seconds": {mode: round(s, 2) for mode, s in seconds.items()},
        "prefill_tokens": {mode: p.stats.prefill_tokens for mode, p in policies.items()},
        "reused_tokens": {mode: p.stats.reused_tokens for mode, p in policies.items()},
        "identical": sum(
            a == b for a, b in zip(outputs["kept"], outputs["batch_only"], strict=True)
        ),
        "ratio": round(seconds["batch_only"] / seconds["kept"], 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
