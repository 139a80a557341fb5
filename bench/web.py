"""Browser environment benchmark: step latency, pool throughput, memory over many episodes, and
nothing left running.

Episodes are MiniWoB++ tasks (click-test, click-button, enter-text, click-link in turn) played
by a scripted solver that reads the instruction and the page tree, through ``BrowserEnv`` on a
``BrowserPool`` of headless system Chromiums, as a rollout would (reset, steps, close). Every
episode must be solved (reward 1): a failure is a broken benchmark, not a figure.

- step latency: ``env.step`` (the action, the benchmark's verdict and the next page tree),
  p50/p95 over the throughput runs, and ``env.reset`` (a fresh context, the task's page);
- throughput: ``--throughput-episodes`` episodes on a pool of 1 browser (one at a time) and on
  a pool of 2 (two at a time); ``ratio`` = episodes/s with 2 over episodes/s with 1;
- memory: ``--episodes`` episodes on a pool of 2; the resident set of this process and all its
  children (the Playwright drivers, Chromium and its renderers) after a warm-up of 10% of them,
  and at the end (``rss_ratio``, target <= 1.10). Browsers are recycled every 200 episodes as
  the pool does by default;
- after each pool closes, no Chromium or Playwright driver this process started is running.

Usage: .venv/bin/python bench/web.py [--episodes 500] [--throughput-episodes 40]

The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

import psutil

from trajforge.envs.browser import BrowserEnv, BrowserPool, MiniWoB
from trajforge.envs.browser.axtree import find
from trajforge.envs.browser.chromium import running_browsers
from trajforge.schema import Message, Role, ToolCall

TASKS = ("click-test", "click-button", "enter-text", "click-link")
RSS_TARGET = 1.10
WARMUP_SHARE = 0.1


def _quoted(goal: str) -> str:
    return goal.split('"')[1]


def _element(tree: str, role: str, name: str) -> str:
    found = find(tree, role, name)
    if found is None:
        raise RuntimeError(f"solver: no [{role} {name!r}] on the page:\n{tree}")
    return found


def solve(task: str, goal: str, tree: str) -> list[tuple[str, dict[str, Any]]]:
    """The calls that solve the task, one per turn."""
    if task == "click-test":
        return [("click", {"element": _element(tree, "button", "Click Me!")})]
    if task == "click-button":
        return [("click", {"element": _element(tree, "button", _quoted(goal))})]
    if task == "click-link":
        return [("click", {"element": _element(tree, "StaticText", _quoted(goal))})]
    box = _element(tree, "textbox", "")
    return [
        ("fill", {"element": box, "text": _quoted(goal)}),
        ("click", {"element": _element(tree, "button", "Submit")}),
    ]


class Timings:
    def __init__(self) -> None:
        self.steps: list[float] = []
        self.resets: list[float] = []


async def episode(pool: BrowserPool, bench: MiniWoB, index: int, timings: Timings) -> None:
    (task,) = bench.tasks(1, seed=index, split="train")
    env = BrowserEnv(bench, pool=pool)
    try:
        began = time.perf_counter()
        opening = await env.reset(task)
        timings.resets.append(time.perf_counter() - began)
        goal, _, tree = opening[-1].text.removeprefix("Task: ").partition("\n\nPage:\n")
        for turn, (name, arguments) in enumerate(solve(task.data["task"], goal, tree)):
            call = ToolCall(id=f"call_{turn}", name=name, arguments=arguments)
            began = time.perf_counter()
            result = await env.step(Message(role=Role.ASSISTANT, content="", tool_calls=[call]))
            timings.steps.append(time.perf_counter() - began)
        if not (result.done and result.reward == 1.0):
            raise RuntimeError(f"episode {task.id} not solved: {result.reward} ({result.info})")
    finally:
        await env.close()


async def play(pool: BrowserPool, n: int, concurrency: int, timings: Timings,
               on_done: Any = None) -> float:  # fmt: skip
    """Play ``n`` episodes, ``concurrency`` at a time; the seconds it took."""
    bench = MiniWoB(TASKS)
    counter = iter(range(n))

    async def worker() -> None:
        for index in counter:
            await episode(pool, bench, index, timings)
            if on_done is not None:
                on_done(index)

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - began


def tree_rss_mb() -> float:
    """Resident set of this process and every process under it, in MB."""
    me = psutil.Process()
    total = me.memory_info().rss
    for child in me.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            continue
    return total / 1e6


def closed(pool: BrowserPool) -> list[int]:
    pool.close()
    deadline = time.monotonic() + 5
    while running_browsers() and time.monotonic() < deadline:
        time.sleep(0.1)
    return [process.pid for process in running_browsers()]


def _ms(values: list[float], q: float) -> float:
    return round(statistics.quantiles(values, n=100)[int(q) - 1] * 1000, 1)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    timings = Timings()
    rates, left = {}, []
    for size in (1, 2):
        pool = BrowserPool(size)
        try:
            await play(pool, 4 * size, size, Timings())  # browsers started, pages cached
            seconds = await play(pool, args.throughput_episodes, size, timings)
        finally:
            left += closed(pool)
        rates[size] = args.throughput_episodes / seconds
        print(f"pool of {size}: {rates[size]:.2f} episodes/s", file=sys.stderr)

    warmup = max(1, int(args.episodes * WARMUP_SHARE))
    rss: dict[str, float] = {}

    def sample(index: int) -> None:
        if index + 1 == warmup:
            rss["warm"] = tree_rss_mb()
        if (index + 1) % 100 == 0:
            print(f"{index + 1} episodes, {tree_rss_mb():.0f} MB", file=sys.stderr)

    pool = BrowserPool(2)
    try:
        await play(pool, args.episodes, 2, Timings(), sample)
        rss["end"] = tree_rss_mb()
    finally:
        left += closed(pool)
    return {
        "episodes": args.episodes,
        "throughput_episodes": args.throughput_episodes,
        "step_p50_ms": _ms(timings.steps, 50),
        "step_p95_ms": _ms(timings.steps, 95),
        "reset_p50_ms": _ms(timings.resets, 50),
        "reset_p95_ms": _ms(timings.resets, 95),
        "episodes_per_s_pool_1": round(rates[1], 2),
        "episodes_per_s_pool_2": round(rates[2], 2),
        "rss_warm_mb": round(rss["warm"], 1),
        "rss_end_mb": round(rss["end"], 1),
        "rss_ratio": round(rss["end"] / rss["warm"], 3),
        "rss_met": rss["end"] / rss["warm"] <= RSS_TARGET,
        "processes_left": len(left),
        "ratio": round(rates[2] / rates[1], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=500, help="episodes of the memory run")
    parser.add_argument("--throughput-episodes", type=int, default=40)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    print(json.dumps(result))
    if result["processes_left"]:
        sys.exit(f"{result['processes_left']} browser processes were left running")


if __name__ == "__main__":
    main()
