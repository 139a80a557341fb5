"""Generation throughput of ``HFPolicy`` dynamic batching on the embedded SmolLM2, on CPU.

Sixteen concurrent episodes' first prompts (chat-rendered calculator questions of different
lengths), greedy, ``max_new_tokens`` each, generated four ways in the same process:

- ``batched``: 16 concurrent ``HFPolicy.generate`` calls (dynamic batching, max_batch_size=16);
- ``one_by_one_policy``: the same requests one after another through ``HFPolicy`` with
  max_batch_size=1;
- ``one_by_one_generate``: ``model.generate`` once per prompt;
- ``padded_generate``: one left-padded ``model.generate`` call on all 16 prompts.

End-of-sequence tokens are ignored (as in vLLM's throughput benchmark), so every sequence
generates exactly ``max_new_tokens`` tokens in every mode and all modes do the same work.
``ratio`` is the batched rate over the faster of the two one-by-one rates; ``vs_padded`` is
the batched rate over the padded ``model.generate`` rate.

Each of ``--rounds`` rounds runs both batched modes once and a 1/rounds slice of the
prompts one by one in both ways, so the load of a shared machine falls on all modes alike;
rates are total tokens over total seconds per mode. All of this runs in fp32.

Memory-bandwidth limit: a decode step reads every weight once (the tied embedding once, for
the LM head), so it cannot run faster than the machine moves those bytes. ``bandwidth``
reports, for fp32 and (where the CPU has native bf16) bf16 weights: the copy bandwidth of a
256 MiB tensor (bytes read plus written per second, best of five), the weight bytes, the
resulting limit in decode steps and in tokens per second at 16 rows, and the batched decode
rate in that dtype as a fraction of it. The decode rate leaves the prefill out: the 16
prompts are generated to ``max_new_tokens`` and to 8 tokens, and the difference in tokens
over the difference in seconds is decode steps of 16 rows alone (``batched_tokens_per_s``
keeps the prefill in). ``--rows`` sets the rows of these runs (16 by default; beyond 16 the
prompts repeat): the bandwidth limit grows with the rows, the compute limit does not.

Compute limit: a decode step of 16 rows also multiplies every matmul weight by 16 vectors, 2
FLOPs per weight and row. The best rate of a large square matmul in that dtype (best of three)
over those FLOPs gives a second ceiling; the lower of the two (the roofline) is what this
machine allows, and ``fraction_of_roofline`` is the decode rate against it. What bounds the
step is measured part by part too: every linear layer once at those rows through the decoder's
own fused, packed weights (``linear_ms``, and the rate that alone would allow), and attention of
one query row against 300 cached keys in the weights' dtype and in fp32.

``--limits-only`` skips the four-way comparison and runs the limits alone; ``ratio`` is then
the lower ``fraction_of_roofline`` of the dtypes.

Run: ``.venv/bin/python bench/generation.py [--max-new-tokens 64] [--rounds 4] [--threads 1]
[--rows 16] [--limits-only]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import torch
import torch.nn.functional as F

from trajforge.policy.base import SamplingParams
from trajforge.policy.engine.decode_weights import decode_weights
from trajforge.policy.hf import HFPolicy
from trajforge.policy.models.embedded import load_embedded
from trajforge.precision import native_bf16

SYSTEM = (
    "You are a careful assistant. Use the calculator tool by writing "
    '<tool_call>{"name": "calculator", "arguments": {"expression": "..."}}</tool_call>.'
)
QUESTIONS = [
    "What is 17 * 23?",
    "Add 1234 and 5678.",
    "A shop sells pens at 3 dollars each. How much do 14 pens cost?",
    "What is 2 to the power of 10?",
    "Compute (45 + 55) * 3 - 12.",
    "If a train travels 60 km per hour for 2.5 hours, how far does it go?",
    "What is 1000 divided by 8?",
    "Subtract 387 from 1002.",
    "A rectangle is 12 m long and 7 m wide. What is its area in square metres?",
    "What is the sum of the first ten positive integers?",
    "How many minutes are there in 3 days?",
    "What is 15 percent of 240?",
    "Alice has 48 apples and gives a quarter of them to Bob, then eats 5. How many are left?",
    "What is 999 * 999?",
    "Compute the average of 12, 18, 25 and 45.",
    "A tank holds 350 litres and drains at 14 litres per minute. How long until it is empty?",
]


T = TypeVar("T")


async def gather_and_close(policy: HFPolicy, jobs: list[Awaitable[T]]) -> list[T]:
    """Every job's result, in order; the policy's worker stopped after, whatever happened."""
    try:
        return list(await asyncio.gather(*jobs))
    finally:
        await policy.close()


def render_prompts(tokenizer: Any) -> list[list[int]]:
    prompts = []
    for i, question in enumerate(QUESTIONS):
        # Different lengths: some episodes carry a longer history of earlier exchanges.
        history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
        messages = [{"role": "system", "content": SYSTEM}, *history * (i % 4)]
        messages.append({"role": "user", "content": question})
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
    return prompts


async def policy_tokens(
    policy: HFPolicy, prompts: list[list[int]], n: int, concurrent: bool
) -> int:
    sampling = SamplingParams(temperature=0.0, max_new_tokens=n)
    if concurrent:
        results = await asyncio.gather(*(policy.generate(p, sampling) for p in prompts))
    else:
        results = [await policy.generate(p, sampling) for p in prompts]
    return sum(len(r.token_ids) for r in results)


def generate_tokens(model: Any, tokenizer: Any, prompts: list[list[int]], n: int) -> int:
    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.inference_mode():
        # min_new_tokens masks the end-of-sequence logit: every row runs all n steps.
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            pad_token_id=pad,
        )
    return int(out[:, width:].numel())


class Clock:
    """Seconds and tokens per mode, summed over rounds."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.tokens: dict[str, int] = {}

    def time(self, label: str, fn: Callable[[], int]) -> None:
        start = time.perf_counter()
        tokens = fn()
        elapsed = time.perf_counter() - start
        self.seconds[label] = self.seconds.get(label, 0.0) + elapsed
        self.tokens[label] = self.tokens.get(label, 0) + tokens
        print(f"{label}: {tokens} tokens in {elapsed:.1f}s", file=sys.stderr)

    def figures(self, label: str) -> dict[str, float]:
        seconds, tokens = self.seconds[label], self.tokens[label]
        return {
            "tokens": tokens,
            "seconds": round(seconds, 2),
            "tokens_per_s": round(tokens / seconds, 2),
        }


SHORT_RUN_TOKENS = 8
"""New tokens of the run whose time, taken from the full run's, leaves decode steps alone."""


def copy_bandwidth(size_bytes: int = 256 * 2**20, repeats: int = 5) -> float:
    """Bytes read plus bytes written per second by the best of ``repeats`` large copies."""
    src = torch.ones(size_bytes // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return 2 * size_bytes / best


def weight_bytes(model: Any) -> int:
    """Bytes of the distinct weights one decode step reads (tied tensors counted once)."""
    seen = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    return sum(seen.values())


def matmul_flops_per_s(dtype: torch.dtype, size: int = 2048, repeats: int = 3) -> float:
    """FLOPs per second of the best of ``repeats`` square ``size`` matmuls in ``dtype``."""
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def matmul_weights(model: Any) -> int:
    """Weights a decode step multiplies (every linear layer's, the LM head's included)."""
    linears = {
        m.weight.data_ptr(): m.weight.numel()
        for m in model.modules()
        if isinstance(m, torch.nn.Linear)
    }
    return sum(linears.values())


def best_ms(fn: Callable[[], object], repeats: int = 20) -> float:
    """Milliseconds of the fastest of ``repeats`` calls of ``fn`` (after one warm-up call)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return 1000 * best


def linear_inputs(model: Any) -> list[int]:
    """The input width of each of ``decode_weights(model)``'s linears, the LM head first."""
    config = model.config
    return [config.hidden_size] + [
        config.hidden_size,
        config.hidden_size,
        config.hidden_size,
        config.intermediate_size,
    ] * config.num_hidden_layers


def step_costs(model: Any, rows: int, keys: int = 300) -> dict[str, float]:
    """What a decode step of ``rows`` rows costs at least, part by part, in the model's dtype.

    ``linear_ms``: every linear layer once (the LM head included), through the decoder's own
    fused weights (``decode_weights``). ``attention_ms_per_layer``: SDPA for one query row against ``keys`` cached
    keys, in the weights' dtype and in fp32 (what the lean forward uses on a CPU)."""
    dtype = next(model.parameters()).dtype
    weights = decode_weights(model)
    linears = [weights.lm_head]
    for layer in weights.layers:
        linears += [layer.qkv, layer.o, layer.gate_up, layer.down]
    sizes = linear_inputs(model)
    inputs = {size: torch.randn(rows, size).to(dtype) for size in set(sizes)}
    linear_ms = 0.0
    with torch.inference_mode():
        for linear, size in zip(linears, sizes, strict=True):
            linear_ms += best_ms(partial(linear, inputs[size]))
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = config.hidden_size // heads

    def attention(dt: torch.dtype) -> float:
        q = torch.randn(rows, heads, 1, head_dim).to(dt)
        k = torch.randn(rows, kv_heads, keys, head_dim).to(dt)
        mask = torch.zeros(rows, 1, 1, keys).to(dt)
        return best_ms(
            lambda: F.scaled_dot_product_attention(q, k, k, attn_mask=mask, enable_gqa=True)
        )

    return {
        "linear_ms": round(linear_ms, 2),
        "linear_limit_tokens_per_s": round(rows * 1000 / linear_ms, 1),
        "attention_ms_per_layer": round(attention(dtype), 3),
        "attention_ms_per_layer_fp32": round(attention(torch.float32), 3),
    }


def bandwidth_figures(
    model: Any, tokenizer: Any, prompts: list[list[int]], n: int, bandwidth: float
) -> dict[str, float]:
    """The batched rate of ``model`` (in its own dtype) over ``prompts`` (one row each) against
    its memory-bandwidth limit and its compute limit."""
    policy = HFPolicy(model, tokenizer, max_batch_size=len(prompts), eos_token_ids=[])
    asyncio.run(policy_tokens(policy, prompts[:2], 4, True))

    def timed(new_tokens: int) -> tuple[int, float]:
        start = time.perf_counter()
        tokens = asyncio.run(policy_tokens(policy, prompts, new_tokens, True))
        return tokens, time.perf_counter() - start

    tokens, seconds = timed(n)
    short_tokens, short_seconds = timed(SHORT_RUN_TOKENS)
    rate = tokens / seconds
    # The two runs prefill the same prompts, so their difference is decode steps alone.
    decode_rate = (tokens - short_tokens) / (seconds - short_seconds)
    size = weight_bytes(model)
    limit_steps = bandwidth / size
    limit_tokens = limit_steps * len(prompts)
    flops = matmul_flops_per_s(next(model.parameters()).dtype)
    compute_steps = flops / (2 * matmul_weights(model) * len(prompts))
    roofline_tokens = min(limit_steps, compute_steps) * len(prompts)
    return {
        "weight_mb": round(size / 2**20, 1),
        "limit_steps_per_s": round(limit_steps, 1),
        "limit_tokens_per_s": round(limit_tokens, 1),
        "batched_tokens_per_s": round(rate, 2),
        "decode_tokens_per_s": round(decode_rate, 2),
        "fraction_of_limit": round(decode_rate / limit_tokens, 3),
        "matmul_gflops": round(flops / 1e9, 1),
        "compute_limit_steps_per_s": round(compute_steps, 1),
        "fraction_of_roofline": round(decode_rate / roofline_tokens, 3),
        **step_costs(model, len(prompts)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.add_argument("--rows", type=int, default=16, help="rows of the limit runs")
    parser.add_argument(
        "--limits-only", action="store_true", help="skip the batched vs one-by-one comparison"
    )
    args = parser.parse_args()
    n = args.max_new_tokens
    if args.threads:
        torch.set_num_threads(args.threads)

    model, tokenizer = load_embedded()
    prompts = render_prompts(tokenizer)
    result: dict[str, Any] = {
        "bench": "generation",
        "model": "SmolLM2-135M-Instruct (float32, CPU)",
        "episodes": len(prompts),
        "prompt_tokens": [len(p) for p in prompts],
        "max_new_tokens": n,
        "rounds": args.rounds,
        "torch_threads": torch.get_num_threads(),
    }
    if not args.limits_only:
        result |= comparison(model, tokenizer, prompts, n, args.rounds)
    bandwidth = copy_bandwidth()
    rows = [prompts[i % len(prompts)] for i in range(args.rows)]
    limits = {"fp32": bandwidth_figures(model, tokenizer, rows, n, bandwidth)}
    if native_bf16():
        bf16_model, _ = load_embedded(torch.bfloat16)
        limits["bf16"] = bandwidth_figures(bf16_model, tokenizer, rows, n, bandwidth)
    result |= {"rows": args.rows, "copy_gb_per_s": round(bandwidth / 1e9, 1), "bandwidth": limits}
    if args.limits_only:
        # The headline without the comparison: the roofline target, which holds in every dtype.
        result["ratio"] = min(figures["fraction_of_roofline"] for figures in limits.values())
    print(json.dumps(result))


def comparison(
    model: Any, tokenizer: Any, prompts: list[list[int]], n: int, rounds: int
) -> dict[str, Any]:
    """The four modes' figures, ``ratio`` and ``vs_padded`` (see the module doc)."""
    batched = HFPolicy(model, tokenizer, max_batch_size=16, eos_token_ids=[])
    single = HFPolicy(model, tokenizer, max_batch_size=1, eos_token_ids=[])

    def run(coro: Callable[[], Awaitable[int]]) -> Callable[[], int]:
        return lambda: asyncio.run(coro())  # type: ignore[arg-type]

    run(lambda: policy_tokens(batched, prompts[:2], 4, True))()  # warm up kernels and caches
    clock = Clock()
    # The machine is shared: every round runs every mode (the batched modes once, a slice of
    # the prompts one by one), so load changes reach all modes alike.
    for r in range(rounds):
        clock.time("batched", run(lambda: policy_tokens(batched, prompts, n, True)))
        clock.time("padded_generate", lambda: generate_tokens(model, tokenizer, prompts, n))
        for prompt in prompts[r::rounds]:
            one = [prompt]
            clock.time("one_by_one_policy", run(partial(policy_tokens, single, one, n, False)))
            clock.time("one_by_one_generate", partial(generate_tokens, model, tokenizer, one, n))
    figures = {label: clock.figures(label) for label in clock.seconds}
    rate = figures["batched"]["tokens_per_s"]
    baseline = max(
        figures["one_by_one_policy"]["tokens_per_s"], figures["one_by_one_generate"]["tokens_per_s"]
    )
    return {
        **figures,
        "ratio": round(rate / baseline, 2),
        "vs_padded": round(rate / figures["padded_generate"]["tokens_per_s"], 2),
        "batching": {
            "prefills": batched.stats.prefills,
            "decode_steps": batched.stats.decode_steps,
            "max_rows": batched.stats.max_rows,
        },
    }


if __name__ == "__main__":
    main()
