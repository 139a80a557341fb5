"""Streaming through the gateway: when the first text of a streamed reply reaches the client,
as a share of the whole reply's time.

One ``OpenAI`` client (the official SDK) asks ``trajforge serve`` on 127.0.0.1 (the server on a
thread of this process) for a streamed reply of ``--max-tokens`` tokens, ``--repeats`` times
one at a time after a warm-up call. For each reply: the time from sending the request to the
first chunk that carries text, and to the end of the stream. ``ratio`` is the median over the
replies of first-text time / whole time: near 1 when the reply is sampled whole before its
chunks are sent, about 1 / tokens plus the prefill's share when each token is sent as it is
sampled.

    .venv/bin/python bench/gateway_stream.py --model embedded
    .venv/bin/python bench/gateway_stream.py --model tiny

Prints one JSON line; ``ratio`` is the headline (target < 0.25).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from openai import OpenAI

from trajforge.policy.naming import load_policy
from trajforge.policy.token_policy import TokenPolicy
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving

PROMPT = "Write a long story about a lighthouse keeper and the ships she guides home."


def _one(client: OpenAI, model: str, max_tokens: int, seed: int) -> tuple[float, float, int]:
    """(seconds to the first text, seconds to the end, completion tokens) of one reply."""
    start = time.perf_counter()
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=max_tokens,
        temperature=1.0,
        seed=seed,
        stream=True,
        stream_options={"include_usage": True},
    )
    first, tokens = None, 0
    for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - start
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    whole = time.perf_counter() - start
    return whole if first is None else first, whole, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    policy = load_policy(args.model)
    assert isinstance(policy, TokenPolicy)
    gateway = Gateway(policy, None, run_id="bench")
    with serving(gateway) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        _one(client, args.model, args.max_tokens, seed=0)  # warm-up: first-call costs
        runs = [_one(client, args.model, args.max_tokens, seed=k + 1) for k in range(args.repeats)]
    ratios = [first / whole for first, whole, _ in runs]
    result = {
        "bench": "gateway_stream",
        "model": args.model,
        "max_tokens": args.max_tokens,
        "tokens": [tokens for _, _, tokens in runs],
        "first_text_s": [round(first, 4) for first, _, _ in runs],
        "whole_s": [round(whole, 4) for _, whole, _ in runs],
        "ratio": round(statistics.median(ratios), 4),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
