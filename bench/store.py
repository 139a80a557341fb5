"""Store benchmark: SQLite store vs plain JSONL for ingest and filtered statistics.

Ingests synthetic 6-turn tool-using trajectories (with token ids and logprobs) into a
``TrajectoryStore`` in batches, and writes the same data as JSONL; then answers one filtered
statistics query (env, status and a reward floor; count, reward mean/std, status breakdown) both
from the store (SQL over the summary table) and by scanning the JSONL (parse + filter in Python).

Usage: .venv/bin/python bench/store.py [--n 100000] [--distinct 10000] [--batch 1000]

The last line printed is one JSON object with the figures; ``ratio`` is the JSONL filtered-stats
time divided by the store's.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from trajforge.formats.jsonl import write_trajectories
from trajforge.schema import Trajectory
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore

ENVS = ("calculator", "python", "sql", "search")
FILTER: dict[str, Any] = {"env": "calculator", "status": "ok", "min_reward": 0.5}


def build(n: int, distinct: int) -> list[Trajectory]:
    """``n`` trajectories: ``distinct`` generated ones, repeated under new ids and runs."""
    base = [
        synthetic_trajectory(i, env=ENVS[i % len(ENVS)], run_id="bench") for i in range(distinct)
    ]
    out: list[Trajectory] = []
    for i in range(n):
        src = base[i % distinct]
        run = f"bench-{i // distinct}"
        out.append(
            src.model_copy(
                update={"id": f"{run}-{i:07d}", "run_id": run, "group_id": f"{run}/{src.task.id}"}
            )
        )
    return out


def jsonl_filtered_stats(path: Path) -> dict[str, Any]:
    """The store's filtered statistics computed the way a script over JSONL would."""
    rewards: list[float] = []
    status: Counter[str] = Counter()
    with path.open("rb") as handle:
        for line in handle:
            rec = json.loads(line)
            outcome = rec["outcome"]
            reward = outcome["reward"]
            if rec["env"] != FILTER["env"] or outcome["status"] != FILTER["status"]:
                continue
            if reward is None or reward < FILTER["min_reward"]:
                continue
            rewards.append(reward)
            status[outcome["status"]] += 1
    return {
        "count": len(rewards),
        "reward_mean": statistics.fmean(rewards) if rewards else None,
        "reward_std": statistics.pstdev(rewards) if rewards else None,
        "status": dict(status),
    }


def timed(fn: Any, repeat: int = 1) -> tuple[float, float, Any]:
    """Best wall time and the CPU time of that call over ``repeat`` calls, and the last result.

    CPU time shows what the code costs when the machine is shared and wall time is inflated.
    """
    best_wall, best_cpu = math.inf, math.inf
    result = None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if wall < best_wall:
            best_wall, best_cpu = wall, cpu
    return best_wall, best_cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="trajectories in store and JSONL")
    parser.add_argument("--distinct", type=int, default=10_000, help="distinct synthetic ones")
    parser.add_argument("--batch", type=int, default=1_000, help="trajectories per add_many call")
    args = parser.parse_args()

    start = time.perf_counter()
    trajs = build(args.n, args.distinct)
    print(f"built {len(trajs)} trajectories in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    first = min(10_000, len(trajs))

    with tempfile.TemporaryDirectory(prefix="trajforge-bench-") as tmp:
        db = Path(tmp) / "store.db"
        jsonl = Path(tmp) / "trajs.jsonl"
        with TrajectoryStore(db) as store:
            wall = [0.0, 0.0]  # first `distinct` trajectories, all of them
            cpu = [0.0, 0.0]
            for b in range(0, len(trajs), args.batch):
                w, c, _ = timed(lambda b=b: store.add_many(trajs[b : b + args.batch]))
                wall[1] += w
                cpu[1] += c
                if b < first:
                    wall[0] += w
                    cpu[0] += c
            print(f"store ingest: {len(trajs) / wall[1]:.0f}/s", file=sys.stderr)
            stats_s, stats_cpu, stats = timed(lambda: store.stats(**FILTER), repeat=5)
            all_stats_s, _, _ = timed(lambda: store.stats(), repeat=3)
            query_s, _, rows = timed(
                lambda: store.query(**FILTER, order_by="reward", descending=True, limit=100),
                repeat=3,
            )
            assert len(rows) == 100

        jsonl_write_s, jsonl_write_cpu, written = timed(lambda: write_trajectories(jsonl, trajs))
        jsonl_stats_s, jsonl_stats_cpu, jstats = timed(lambda: jsonl_filtered_stats(jsonl))
        if jstats["count"] != stats["count"] or not math.isclose(
            jstats["reward_mean"], stats["reward_mean"], rel_tol=1e-9
        ):
            raise SystemExit(f"store and JSONL disagree: {stats['count']} vs {jstats['count']}")
        db_mb = sum(p.stat().st_size for p in Path(tmp).glob("store.db*")) / 1e6
        jsonl_mb = jsonl.stat().st_size / 1e6

    result = {
        "n": len(trajs),
        "matched": stats["count"],
        "store_ingest_per_s_first_10k": round(first / wall[0]),
        "store_ingest_per_s": round(len(trajs) / wall[1]),
        "store_ingest_per_cpu_s": round(len(trajs) / cpu[1]),
        "jsonl_write_per_s": round(written / jsonl_write_s),
        "jsonl_write_per_cpu_s": round(written / jsonl_write_cpu),
        "store_filtered_stats_ms": round(stats_s * 1000, 2),
        "store_filtered_stats_cpu_ms": round(stats_cpu * 1000, 2),
        "store_stats_all_ms": round(all_stats_s * 1000, 2),
        "store_query_top100_ms": round(query_s * 1000, 2),
        "jsonl_filtered_stats_ms": round(jsonl_stats_s * 1000, 1),
        "jsonl_filtered_stats_cpu_ms": round(jsonl_stats_cpu * 1000, 1),
        "store_mb": round(db_mb, 1),
        "jsonl_mb": round(jsonl_mb, 1),
        "ratio": round(jsonl_stats_s / stats_s, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
