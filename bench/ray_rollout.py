"""Rollouts on Ray actors: the speed-up of a second actor on a CPU-bound environment, and what
Ray costs over the in-process engine on a latency-bound one.

Both environments are the calculator (its tasks, verifier and scripted expert, so the policy
costs nothing and every episode is solved) with its one tool changed:

- ``busy``: each call burns ``--burn-ms`` of pure-Python CPU work on a thread. One process
  runs one such call at a time (the GIL), so one actor is bound to one core; two actors on two
  cores should take about half the time. ``ratio`` = one actor's wall time / two actors'.
- ``waiting``: each call sleeps ``--wait-ms`` (``asyncio.sleep``), so the run is bound by
  latency, not CPU. The in-process engine and two actors run the same episodes with the same
  total concurrency; ``latency_overhead`` = Ray's time / local time - 1.

The local cluster is started once, before any timing (``cluster_start_s``), as a user's
existing cluster would be. The headline figures time the episodes from the first one handed
out to the last one back (``ratio``, ``latency_overhead``): the actors' start, a one-time cost
per run that RL pays once for all its steps, is left out and reported as ``actor_start_s``;
``cpu_wall_ratio`` and ``latency_wall_overhead`` include it. Each setting runs ``--repeats``
times, alternating, and the median is kept.

    .venv/bin/python bench/ray_rollout.py

Prints one JSON line; ``ratio`` is the CPU-bound speed-up of two actors over one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import ray

from trajforge.distributed import RayOptions
from trajforge.distributed.runner import RayRunner
from trajforge.envs.builtin import calculator as calc
from trajforge.envs.tool import tool
from trajforge.envs.tool_env import ToolEnv
from trajforge.rollout import RolloutHook, RolloutRun, RolloutSpec, run_rollout

TASKS = calc.generate_tasks(256, seed=0)
BURN_MS = float(os.environ.get("RAY_BENCH_BURN_MS", "60"))
WAIT_MS = float(os.environ.get("RAY_BENCH_WAIT_MS", "200"))


def _burn(ms: float) -> None:
    end = time.thread_time() + ms / 1000
    x = 0
    while time.thread_time() < end:
        for i in range(2000):
            x += i * i


@tool
def busy_calculator_tool(expression: str) -> str:
    """Evaluate an arithmetic expression after some CPU work.

    Args:
        expression: Numbers with + - * / // % ** and parentheses, e.g. "12 * 7 - 5".
    """
    _burn(BURN_MS)
    return calc.calculator.fn(expression)


@tool
async def waiting_calculator_tool(expression: str) -> str:
    """Evaluate an arithmetic expression after a wait.

    Args:
        expression: Numbers with + - * / // % ** and parentheses, e.g. "12 * 7 - 5".
    """
    await asyncio.sleep(WAIT_MS / 1000)
    return calc.calculator.fn(expression)


def _env(fn: Any, name: str) -> ToolEnv:
    fn.name = "calculator"  # the expert calls the tool by the calculator's name
    return ToolEnv(
        [fn], tasks=TASKS, verifier=calc.verify, name=name, expert=calc.expert, max_turns=8
    )


def busy() -> ToolEnv:
    """The calculator whose tool burns CPU."""
    return _env(busy_calculator_tool, "busy-calculator")


def waiting() -> ToolEnv:
    """The calculator whose tool waits."""
    return _env(waiting_calculator_tool, "waiting-calculator")


class _PlayTime(RolloutHook):
    """Seconds from the first episode handed out to the rollout's end."""

    def __init__(self) -> None:
        self.started = 0.0
        self.seconds = 0.0

    def on_rollout_start(self, run: RolloutRun) -> None:
        self.started = time.perf_counter()

    def on_rollout_end(self, run: RolloutRun) -> None:
        self.seconds = time.perf_counter() - self.started


def _timed(spec: RolloutSpec, actors: int | None, slots: int) -> tuple[float, float]:
    """(wall seconds, play seconds) of ``spec`` run locally (``actors`` None) or on Ray."""
    play = _PlayTime()
    runner = None if actors is None else RayRunner(RayOptions(actors=actors, slots=slots))
    t0 = time.perf_counter()
    out = run_rollout(spec, hooks=[play], **({} if runner is None else {"runner": runner}))
    wall = time.perf_counter() - t0
    assert all(t.outcome.reward == 1.0 for t in out), "every episode is solved by the expert"
    return wall, play.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-tasks", type=int, default=64)
    parser.add_argument("--wait-tasks", type=int, default=128)
    parser.add_argument("--slots", type=int, default=8, help="episodes per actor at once")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    here = Path(__file__).resolve()

    def spec(factory: str, tasks: int, concurrency: int | None = None) -> RolloutSpec:
        return RolloutSpec.model_validate(
            {
                "env": f"{here}:{factory}",
                "policy": {"name": "expert"},
                "tasks": {"count": tasks},
                "concurrency": concurrency,
            }
        )

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    # The bench's knobs reach the actors' copies of this module through the environment.
    os.environ["RAY_BENCH_BURN_MS"] = str(BURN_MS)
    os.environ["RAY_BENCH_WAIT_MS"] = str(WAIT_MS)
    t0 = time.perf_counter()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level="WARNING")
    cluster_start = time.perf_counter() - t0
    try:
        cpu = spec("busy", args.cpu_tasks)
        wait = spec("waiting", args.wait_tasks, concurrency=2 * args.slots)
        times: dict[str, list[tuple[float, float]]] = {
            k: [] for k in ("one", "two", "local", "ray")
        }
        for _ in range(args.repeats):
            times["one"].append(_timed(cpu, 1, args.slots))
            times["two"].append(_timed(cpu, 2, args.slots))
            times["local"].append(_timed(wait, None, 0))
            times["ray"].append(_timed(wait, 2, args.slots))
    finally:
        ray.shutdown()

    def median(key: str, i: int) -> float:
        return statistics.median(t[i] for t in times[key])

    one, two, local, on_ray = (median(k, 0) for k in ("one", "two", "local", "ray"))
    ray_play = median("ray", 1)
    print(
        json.dumps(
            {
                "bench": "ray_rollout",
                "ratio": round(median("one", 1) / median("two", 1), 3),
                "latency_overhead": round(ray_play / median("local", 1) - 1, 4),
                "cpu_wall_ratio": round(one / two, 3),
                "latency_wall_overhead": round(on_ray / local - 1, 4),
                "cpu_one_actor_s": round(one, 3),
                "cpu_two_actors_s": round(two, 3),
                "latency_local_s": round(local, 3),
                "latency_ray_s": round(on_ray, 3),
                "actor_start_s": round(on_ray - ray_play, 3),
                "cluster_start_s": round(cluster_start, 3),
                "burn_ms": BURN_MS,
                "wait_ms": WAIT_MS,
                "cpu_tasks": args.cpu_tasks,
                "wait_tasks": args.wait_tasks,
                "slots": args.slots,
                "repeats": args.repeats,
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
