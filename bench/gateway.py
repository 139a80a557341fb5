"""The gateway's cost: 16 concurrent streaming clients through ``trajforge serve`` vs the same
policy called in process, the Messages API streamed vs Chat Completions streamed, and the
latency the HTTP hop adds to one request.

Both sides sample the same completions: the same prompts (each client's conversation rendered
by the policy's own renderer), the same per-request seeds and ``max_tokens``, the same
``HFPolicy`` (``max_batch_size=16``), in one process. The in-process side calls
``policy.generate`` from 16 coroutines at once; the gateway side runs 16 ``AsyncOpenAI`` clients
with ``stream=True`` against the gateway on 127.0.0.1 (the server on a thread of this process, so
the two sides share the same cores and model). Each side runs ``--repeats`` times, alternating,
and the best of each is kept. ``ratio`` is gateway tokens/s over in-process tokens/s.

The Messages API side runs 16 ``AsyncAnthropic`` clients streaming the same requests (the
gateway's ``seed`` extension keeps the samples alike) in the same alternation;
``messages_ratio`` is its tokens/s over the Chat Completions side's (target >= 0.9).

Added latency is measured one request at a time (nothing else running): each of ``--single``
requests is sent in process and through the gateway, and the difference of their wall times is
the HTTP hop (JSON, SSE, rendering the request, recording the trajectory); p50 and p99 over the
requests.

    .venv/bin/python bench/gateway.py --model embedded
    .venv/bin/python bench/gateway.py --model tiny --max-tokens 32

Prints one JSON line; ``ratio`` is the throughput ratio (target >= 0.9).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from anthropic import AsyncAnthropic
from openai import AsyncOpenAI

from trajforge.policy.base import SamplingParams
from trajforge.policy.naming import load_policy
from trajforge.policy.token_policy import TokenPolicy
from trajforge.schema import Message, Role
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving
from trajforge.store import TrajectoryStore

CLIENTS = 16


def _question(k: int) -> str:
    return f"Question {k}: explain in a few sentences why the sky looks blue at noon."


async def _in_process(policy: TokenPolicy, max_tokens: int, clients: int) -> tuple[float, int]:
    async def one(k: int) -> int:
        session = policy.start_session([Message(role=Role.USER, content=_question(k))], [])
        sampling = SamplingParams(temperature=1.0, max_new_tokens=max_tokens, seed=k)
        completion = await policy.generate(session.prompt_ids(), sampling)
        return len(completion.token_ids)

    start = time.perf_counter()
    tokens = await asyncio.gather(*(one(k) for k in range(clients)))
    return time.perf_counter() - start, sum(tokens)


async def _chat_stream(url: str, model: str, max_tokens: int, k: int) -> int:
    client = AsyncOpenAI(base_url=f"{url}/sessions/bench-{k}-{time.time_ns()}/v1", api_key="x")
    stream = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": _question(k)}],
        max_tokens=max_tokens,
        seed=k,
        temperature=1.0,
        stream=True,
        stream_options={"include_usage": True},
    )
    tokens = 0
    async for chunk in stream:
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    await client.close()
    return tokens


async def _messages_stream(url: str, model: str, max_tokens: int, k: int) -> int:
    client = AsyncAnthropic(base_url=f"{url}/sessions/bench-m-{k}-{time.time_ns()}", api_key="x")
    stream = await client.messages.create(
        model=model,
        messages=[{"role": "user", "content": _question(k)}],
        max_tokens=max_tokens,
        stream=True,
        extra_body={"seed": k},  # temperature 1, the default, as on the chat side
    )
    tokens = 0
    async for event in stream:
        if event.type == "message_delta":
            tokens = event.usage.output_tokens
    await client.close()
    return tokens


STREAMS = {"chat": _chat_stream, "messages": _messages_stream}


async def _through_gateway(
    url: str, model: str, max_tokens: int, clients: int, api: str = "chat"
) -> tuple[float, int]:
    one = STREAMS[api]
    start = time.perf_counter()
    tokens = await asyncio.gather(*(one(url, model, max_tokens, k) for k in range(clients)))
    return time.perf_counter() - start, sum(tokens)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded", help="embedded, tiny or a model folder")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--single", type=int, default=20, help="requests for the added latency")
    args = parser.parse_args()

    policy = load_policy(args.model, max_batch_size=CLIENTS)
    assert isinstance(policy, TokenPolicy)
    with tempfile.TemporaryDirectory() as tmp, TrajectoryStore(Path(tmp) / "bench.db") as store:
        gateway = Gateway(policy, store, run_id="bench", model_names=(args.model,))
        with serving(gateway) as url:
            # Warm both paths (first decode allocations, the HTTP client's first connection).
            asyncio.run(_in_process(policy, 4, 2))
            asyncio.run(_through_gateway(url, args.model, 4, 2))
            asyncio.run(_through_gateway(url, args.model, 4, 2, "messages"))
            local, served, messages = [], [], []
            for _ in range(args.repeats):
                local.append(asyncio.run(_in_process(policy, args.max_tokens, CLIENTS)))
                served.append(
                    asyncio.run(_through_gateway(url, args.model, args.max_tokens, CLIENTS))
                )
                messages.append(
                    asyncio.run(
                        _through_gateway(url, args.model, args.max_tokens, CLIENTS, "messages")
                    )
                )
            added = []
            for _ in range(args.single):
                t_local, _ = asyncio.run(_in_process(policy, args.max_tokens, 1))
                t_served, _ = asyncio.run(_through_gateway(url, args.model, args.max_tokens, 1))
                added.append((t_served - t_local) * 1000)
        stored = store.count(run="bench")
    local_rate = max(tokens / seconds for seconds, tokens in local)
    served_rate = max(tokens / seconds for seconds, tokens in served)
    messages_rate = max(tokens / seconds for seconds, tokens in messages)
    result = {
        "bench": "gateway",
        "model": args.model,
        "precision": policy.precision,
        "clients": CLIENTS,
        "max_tokens": args.max_tokens,
        "tokens_per_run": {
            "in_process": local[0][1],
            "gateway": served[0][1],
            "messages": messages[0][1],
        },
        "in_process_tok_s": round(local_rate, 1),
        "gateway_tok_s": round(served_rate, 1),
        "messages_tok_s": round(messages_rate, 1),
        "messages_ratio": round(messages_rate / served_rate, 3),
        "added_latency_ms": {
            "p50": round(statistics.median(added), 1),
            "p99": round(_percentile(added, 0.99), 1),
        },
        "trajectories_stored": stored,
        "ratio": round(served_rate / local_rate, 3),
    }
    asyncio.run(policy.close())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
