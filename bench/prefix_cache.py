"""Prefix-cache lookups and stores: the hashed index against a scan of every entry.

An RL rollout between two weight updates leaves one entry per finished episode in the
``PrefixCache``; every prompt the engine admits is looked up and every finished sequence stored.
The baseline is the scan the cache did before its index: compare the prompt with every entry
(and, on a store, every entry with the new one). Both run side by side on the same entries and
prompts: episodes of a shared system prompt and per-task turns of ~40 tokens, the shape of a
multi-turn rollout's contexts.

    .venv/bin/python bench/prefix_cache.py

Prints one JSON line; ``ratio`` is scan time / index time for lookups plus stores at the largest
entry count.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections import OrderedDict
from typing import Any

import torch

from trajforge.policy.engine.prefix_cache import PrefixCache, PrefixEntry


class ScanPrefixCache:
    """The baseline: lookups and stores compare against every entry."""

    def __init__(self) -> None:
        self.entries: OrderedDict[tuple[int, ...], PrefixEntry] = OrderedDict()

    def lookup(self, prompt: list[int]) -> PrefixEntry | None:
        best: PrefixEntry | None = None
        for entry in self.entries.values():
            n = len(entry.tokens)
            longer = best is None or n > len(best.tokens)
            if n < len(prompt) and longer and prompt[:n] == entry.tokens:
                best = entry
        if best is not None:
            self.entries.move_to_end(tuple(best.tokens))
        return best

    def store(self, entry: PrefixEntry) -> None:
        key = tuple(entry.tokens)
        for old in [k for k in self.entries if len(k) <= len(key) and key[: len(k)] == k]:
            del self.entries[old]
        self.entries[key] = entry


def episodes(count: int, turns: int, seed: int) -> list[list[list[int]]]:
    """Per episode, the token ids of its context after each turn (each extends the last)."""
    rng = random.Random(seed)
    system = [rng.randrange(49152) for _ in range(120)]
    out = []
    for _ in range(count):
        context = system + [rng.randrange(49152) for _ in range(30)]
        steps = []
        for _ in range(turns):
            context = context + [rng.randrange(49152) for _ in range(40)]
            steps.append(context)
        out.append(steps)
    return out


def timed(cache: Any, contexts: list[list[list[int]]], state: torch.Tensor) -> float:
    """Time storing every episode's turns and looking up each next turn's prompt."""
    start = time.perf_counter()
    for steps in contexts:
        for turn, context in enumerate(steps):
            if turn:
                cache.lookup(context)
            cache.store(PrefixEntry(context[:-1], [state], [state]))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--entries", type=lambda s: [int(x) for x in s.split(",")], default=[100, 1000, 4000]
    )
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    state = torch.zeros(1)
    results = []
    for count in args.entries:
        contexts = episodes(count, args.turns, seed=count)
        scan_times, index_times = [], []
        for _ in range(args.repeats):
            scan_times.append(timed(ScanPrefixCache(), contexts, state))
            index_times.append(timed(PrefixCache(1 << 40), contexts, state))
        scan_s, index_s = statistics.median(scan_times), statistics.median(index_times)
        operations = count * (2 * args.turns - 1)
        results.append(
            {
                "entries": count,
                "operations": operations,
                "scan_ms_per_op": round(1e3 * scan_s / operations, 4),
                "index_ms_per_op": round(1e3 * index_s / operations, 4),
                "ratio": round(scan_s / index_s, 2),
            }
        )
    print(json.dumps({"bench": "prefix_cache", "results": results, "ratio": results[-1]["ratio"]}))


if __name__ == "__main__":
    main()
