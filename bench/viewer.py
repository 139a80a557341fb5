"""Viewer benchmark: server time of table and trajectory pages, and the server's memory, over a
large store.

Builds a store of ``--n`` synthetic 6-turn trajectories (``--distinct`` generated ones repeated
under new ids, one run per repetition, groups of 4 samples) with ``add_many`` in batches, starts
``trajforge view --store`` as its own process, and requests HTML pages one at a time: table
pages (the default listing, each sort, deep offsets, reward, status, env and score filters, a
run's page) and trajectory pages (random ids, full conversation and token view), plus the runs
page, group pages, and the model and free-text filters as figures of their own (runs carry one
of three models; text queries are words and phrases of stored messages, rare and common). The
time of each page is the server's own (its ``Server-Timing`` header); memory is the server
process's peak resident set (``VmHWM``) at the end.

Usage: .venv/bin/python bench/viewer.py [--n 100000] [--distinct 10000] [--requests 200]

The last line printed is one JSON object with the figures; ``ratio`` is the 300 ms target
divided by the worst p95 of the table, trajectory, model-filter and text-filter pages (above 1:
every target is met).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx

from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore

ENVS = ("calculator", "python", "sql", "search")
MODELS = ("synthetic", "smollm2-sft", "smollm2-rl")
SAMPLES = 4
TARGET_MS = 300.0
RSS_TARGET_MB = 500.0
TRAJFORGE = str(Path(sys.executable).parent / "trajforge")
_DUR = re.compile(r"app;dur=([0-9.]+)")
PAGES_WITH_TARGET = ("table", "trajectory", "model_filter", "text_filter")


def build_store(path: Path, n: int, distinct: int, batch: int) -> float:
    """Write ``n`` trajectories to a new store at ``path``; returns the seconds it took."""
    start = time.perf_counter()
    base = [
        synthetic_trajectory(
            i, env=ENVS[(i // SAMPLES) % len(ENVS)], run_id="bench", samples_per_task=SAMPLES
        )
        for i in range(distinct)
    ]
    with TrajectoryStore(path) as store:
        for first in range(0, n, batch):
            chunk = []
            for i in range(first, min(first + batch, n)):
                src, run = base[i % distinct], f"bench-{i // distinct}"
                chunk.append(
                    src.model_copy(
                        update={
                            "id": f"{run}-{i:07d}",
                            "run_id": run,
                            "group_id": f"{run}/{src.task.id}",
                            "created_at": 1_767_225_600.0 + i,
                            "model": MODELS[(i // distinct) % len(MODELS)],
                        }
                    )
                )
            store.add_many(chunk)
            print(f"\rstored {first + len(chunk):,}/{n:,}", end="", file=sys.stderr)
        for r in range((n + distinct - 1) // distinct):
            store.set_run(f"bench-{r}", {"kind": "bench"})
    print(file=sys.stderr)
    return time.perf_counter() - start


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _peak_rss_mb(pid: int) -> tuple[float, float]:
    """The process's peak and current resident set, MB (Linux ``/proc``)."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmHWM"].split()[0]) / 1024, int(fields["VmRSS"].split()[0]) / 1024


def _summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered), 2),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
        "max_ms": round(ordered[-1], 2),
    }


def measure(client: httpx.Client, urls: list[str]) -> list[float]:
    """The server time (ms) of each page; a page that is not a 200 stops the bench."""
    times = []
    for url in urls:
        response = client.get(url)
        if response.status_code != 200:
            raise SystemExit(f"{url}: {response.status_code} {response.text[:300]}")
        match = _DUR.search(response.headers.get("server-timing", ""))
        if match is None:
            raise SystemExit(f"{url}: no Server-Timing header")
        times.append(float(match.group(1)))
    return times


def page_urls(n: int, distinct: int, count: int, rng: random.Random) -> dict[str, list[str]]:
    """The pages to request, by kind."""
    runs = (n + distinct - 1) // distinct

    def some(make: Callable[[], str]) -> list[str]:
        return [make() for _ in range(count)]

    tables = [
        lambda: "/trajectories",
        lambda: (
            f"/trajectories?sort={rng.choice(['reward', 'tokens', 'turns', 'task_id'])}"
            f"&desc={rng.choice(['true', 'false'])}"
        ),
        lambda: f"/trajectories?sort=reward&offset={rng.randrange(max(1, n - 50))}",
        lambda: f"/trajectories?offset={rng.randrange(max(1, n - 50))}",
        lambda: f"/trajectories?min_reward={rng.random():.2f}&env={rng.choice(ENVS)}&status=ok",
        lambda: f"/trajectories?score=correct&min_score={rng.random():.2f}&sort=reward",
        lambda: f"/runs/bench-{rng.randrange(runs)}?min_reward=0.5",
        lambda: f"/runs/bench-{rng.randrange(runs)}?offset={rng.randrange(max(1, distinct - 50))}",
    ]

    def trajectory() -> str:
        i = rng.randrange(n)
        return f"/trajectories/bench-{i // distinct}-{i:07d}"

    def group() -> str:
        i = rng.randrange(n)
        return f"/groups/bench-{i // distinct}/task-{(i % distinct) // SAMPLES}"

    def text_query() -> str:
        """Words as a user searches them: a rare expression of one task, a trajectory's answer,
        or a phrase every trajectory holds."""
        traj = synthetic_trajectory(
            rng.randrange(distinct), run_id="bench", samples_per_task=SAMPLES
        )
        expression = traj.messages[1].content.split("(")[1].split(")")[0]
        answer = traj.messages[-1].content.removesuffix(".")
        return rng.choice([expression, answer, "careful calculator", "Step 3: compute"])

    return {
        "table": some(lambda: rng.choice(tables)()),
        "trajectory": some(trajectory),
        "group": some(group)[: max(1, count // 10)],
        "runs": ["/"] * max(1, count // 20),
        "model_filter": some(
            lambda: (
                f"/trajectories?model={rng.choice(MODELS)}"
                + rng.choice(["", f"&offset={rng.randrange(1000)}", "&sort=reward", "&status=ok"])
            )
        )[: max(1, count // 4)],
        "text_filter": [
            f"/trajectories?{urlencode({'q': text_query()})}" for _ in range(max(1, count // 4))
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="trajectories in the store")
    parser.add_argument("--distinct", type=int, default=10_000, help="distinct synthetic ones")
    parser.add_argument("--batch", type=int, default=2_000, help="trajectories per add_many")
    parser.add_argument("--requests", type=int, default=200, help="pages of each main kind")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)

    with tempfile.TemporaryDirectory(prefix="trajforge-bench-viewer-") as tmp:
        db = Path(tmp) / "store.db"
        build_s = build_store(db, args.n, args.distinct, args.batch)
        db_mb = sum(p.stat().st_size for p in Path(tmp).glob("store.db*")) / 1e6
        print(f"built the store in {build_s:.1f}s ({db_mb:.0f} MB)", file=sys.stderr)
        port = _free_port()
        server = subprocess.Popen(
            [TRAJFORGE, "view", "--store", str(db), "--port", str(port)],
            stderr=subprocess.DEVNULL,
            env=os.environ.copy(),
        )
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        client.get("/api/runs")
                        break
                    except httpx.ConnectError:
                        if server.poll() is not None or time.monotonic() > deadline:
                            raise SystemExit("trajforge view did not start") from None
                        time.sleep(0.1)
                urls = page_urls(args.n, args.distinct, args.requests, rng)
                measure(client, urls["table"][:5] + urls["trajectory"][:5] + urls["group"][:1])
                figures = {kind: _summary(measure(client, u)) for kind, u in urls.items()}
            peak_mb, rss_mb = _peak_rss_mb(server.pid)
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()

    worst = max(figures[kind]["p95_ms"] for kind in PAGES_WITH_TARGET)
    result: dict[str, Any] = {
        "n": args.n,
        "store_mb": round(db_mb, 1),
        "build_s": round(build_s, 1),
        **{f"{kind}_{k}": v for kind, f in figures.items() for k, v in f.items() if k != "n"},
        "server_peak_rss_mb": round(peak_mb, 1),
        "server_rss_mb": round(rss_mb, 1),
        "p95_met": worst < TARGET_MS,
        "rss_met": peak_mb < RSS_TARGET_MB,
        "ratio": round(TARGET_MS / worst, 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
