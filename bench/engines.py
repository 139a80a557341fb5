"""Decode speed of trajforge's engine against the engines a user would pick instead, on one CPU.

The same weights (the embedded SmolLM2-135M-Instruct, in one dtype for all) and the same
prompts (the calculator-style prompts of ``bench/generation.py``), greedy, end-of-sequence
ignored so every row samples ``--max-new-tokens``:

- ``trajforge``: ``HFPolicy`` (the in-process decode engine), the rows as concurrent calls;
- ``vllm``: vLLM's CPU build (``vllm:embedded``, started in ``.venv-vllm``), the rows as
  concurrent requests to its completions endpoint with token-id prompts;
- ``hf_generate``: one left-padded ``model.generate`` call on all rows;
- ``llama_cpp``: ``llama-cpp-python`` where it imports (it is not installed by ``make setup``:
  it builds llama.cpp from source) and ``--gguf`` names the same weights as a GGUF file in the
  dtype (``llama_cpp_engine.py``, the rows as sequences of one batch); skipped with the reason
  where either is missing.

For each engine and each of ``--rows`` (1, 16, 32): the decode rate in tokens per second,
prefill left out (each batch runs to ``--max-new-tokens`` and to 8 tokens; the difference in
tokens over the difference in seconds), and the time to the first token of a 1,000-token
prompt (the median of three, after one to warm up). The last line is one JSON object; ``ratio`` is trajforge's decode rate at the most
rows over the fastest other engine's.

Run: ``.venv/bin/python bench/engines.py [--dtype float32] [--rows 1 16 32]
[--max-new-tokens 64] [--gguf smollm2-f32.gguf]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from generation import SHORT_RUN_TOKENS, generate_tokens, render_prompts
from llama_cpp_engine import LlamaCppRows

from trajforge.errors import ConfigError
from trajforge.policy import HFPolicy, SamplingParams, load_embedded, load_policy
from trajforge.policy.base import Policy
from trajforge.policy.vllm import VLLMPolicy

LONG_PROMPT_TOKENS = 1000

Generate = Callable[[list[list[int]], int], int]
"""Sample ``n`` tokens after each prompt, all rows at once; the tokens sampled."""


def policy_engine(policy: Policy) -> Generate:
    """Rows as concurrent ``generate`` calls (each engine batches them its own way)."""

    async def all_rows(prompts: list[list[int]], n: int) -> int:
        sampling = SamplingParams(temperature=0.0, max_new_tokens=n)
        done = await asyncio.gather(*(policy.generate(p, sampling) for p in prompts))
        return sum(len(c.token_ids) for c in done)

    return lambda prompts, n: asyncio.run(all_rows(prompts, n))


def decode_rate(generate: Generate, prompts: list[list[int]], n: int) -> float:
    """Decode tokens per second over ``prompts``, the prefill left out."""
    generate(prompts[:2], 2)  # warm-up
    timed: list[tuple[int, float]] = []
    for new_tokens in (n, SHORT_RUN_TOKENS):
        start = time.perf_counter()
        tokens = generate(prompts, new_tokens)
        timed.append((tokens, time.perf_counter() - start))
    (tokens, seconds), (short_tokens, short_seconds) = timed
    return (tokens - short_tokens) / max(seconds - short_seconds, 1e-9)


def first_token_s(generate: Generate, long_prompts: list[list[int]]) -> float:
    """The median seconds to the first token of the prompts after the first, which warms the
    long-prompt path (an engine's first prompt this long grows its buffers: measured 3-4 s of
    trajforge's first 1,000-token prompt). Prompts differ from their first token, so no engine's
    prefix cache serves one from another."""
    generate(long_prompts[:1], 1)
    seconds = []
    for prompt in long_prompts[1:]:
        start = time.perf_counter()
        generate([prompt], 1)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def rows_of(prompts: list[list[int]], rows: int) -> list[list[int]]:
    return [prompts[k % len(prompts)] for k in range(rows)]


def measure(
    generate: Generate, prompts: list[list[int]], long_prompts: list[list[int]], args: Any
) -> dict[str, float]:
    figures = {
        f"decode_tokens_per_s_{rows}": round(
            decode_rate(generate, rows_of(prompts, rows), args.max_new_tokens), 1
        )
        for rows in args.rows
    }
    figures["first_token_s_1000"] = round(first_token_s(generate, long_prompts), 3)
    return figures


def trajforge_engine(model: Any, tokenizer: Any, rows: int) -> Generate:
    return policy_engine(HFPolicy(model, tokenizer, max_batch_size=rows, eos_token_ids=[]))


def hf_generate_engine(model: Any, tokenizer: Any) -> Generate:
    return lambda prompts, n: generate_tokens(model, tokenizer, prompts, n)


def vllm_engine(dtype: str, rows: int) -> tuple[Generate | None, str, Callable[[], None]]:
    """vLLM's CPU build over the same weights, or why it cannot run here."""
    try:
        policy = load_policy("vllm:embedded", dtype=getattr(torch, dtype), max_batch_size=rows,
                             max_lora_rank=None)  # fmt: skip
    except ConfigError as exc:
        return None, str(exc), lambda: None
    assert isinstance(policy, VLLMPolicy)
    policy.client.extra_body = {"ignore_eos": True}  # every row samples all its tokens
    return policy_engine(policy), "", lambda: asyncio.run(policy.close())


def llama_cpp_engine(
    gguf: Path | None, rows: int, context: int
) -> tuple[Generate | None, str, Callable[[], None]]:
    """llama.cpp over ``gguf``, or why it cannot run here."""
    if gguf is None:
        return (
            None,
            "no --gguf: the weights as GGUF in the dtype (docs/benchmarks.md)",
            lambda: None,
        )
    try:
        engine = LlamaCppRows(gguf, rows, context)
    except ImportError as exc:
        return None, f"llama-cpp-python is not installed ({exc}): it builds llama.cpp from source", lambda: None  # fmt: skip
    return engine.generate, "", engine.close


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 16, 32])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument(
        "--gguf", type=Path, default=None, help="the weights as GGUF, for llama.cpp"
    )
    args = parser.parse_args()
    model, tokenizer = load_embedded(getattr(torch, args.dtype))
    prompts = render_prompts(tokenizer)
    filler = tokenizer.encode(" ".join(["the quick brown fox"] * 300), add_special_tokens=False)
    # Windows of the 4-token cycle at each offset: 4 prompts, each with its own first token.
    long_prompts = [filler[k : k + LONG_PROMPT_TOKENS] for k in range(4)]
    most = max(args.rows)
    engines: dict[str, dict[str, Any]] = {}

    def done(name: str, figures: dict[str, Any]) -> None:
        engines[name] = figures
        print(name, figures, file=sys.stderr, flush=True)

    done(
        "trajforge", measure(trajforge_engine(model, tokenizer, most), prompts, long_prompts, args)
    )
    generate, why, close = vllm_engine(args.dtype, most)
    try:
        done(
            "vllm", measure(generate, prompts, long_prompts, args) if generate else {"skipped": why}
        )
    finally:
        close()
    done("hf_generate", measure(hf_generate_engine(model, tokenizer), prompts, long_prompts, args))
    # Every row's prompt and tokens at once, or one long prompt alone.
    rows_tokens = most * (max(len(p) for p in prompts) + args.max_new_tokens + 8)
    context = -(-max(rows_tokens, LONG_PROMPT_TOKENS + 16) // 256) * 256
    generate, why, close = llama_cpp_engine(args.gguf, most, context)
    try:
        done(
            "llama_cpp",
            measure(generate, prompts, long_prompts, args) if generate else {"skipped": why},
        )
    finally:
        close()
    key = f"decode_tokens_per_s_{most}"
    others = [f[key] for n, f in engines.items() if n != "trajforge" and key in f]
    result = {
        "bench": "engines",
        "date": time.strftime("%Y-%m-%d"),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "dtype": args.dtype,
        "max_new_tokens": args.max_new_tokens,
        "engines": engines,
        "ratio": round(engines["trajforge"][key] / max(others), 3) if others else None,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
