"""Soak: long runs whose memory must stay flat.

Each soak starts the work as its own process (``trajforge run``, ``serve``, ``view``, ``eval``,
as a user would), samples the resident set of that process and all its children (psutil) every
``--interval`` seconds, together with how much of the work is done, and compares two windows:

- warm-up RSS: the highest tree RSS sampled while the work went from 10% to 15% done (the first
  10% is warm-up: model load, first allocations, caches filling);
- end RSS: the highest sampled over the last 5% of the work.

A window's highest sample, not one sample, because RSS swings with what is in flight (the batch
being decoded, the agent programs alive); both windows see the same load. Peak RSS is the
highest of every sample and the main process's own ``VmHWM``.

Soaks (``--soak NAME``, repeatable; default all):

- ``rl``: the RL stage of ``examples/agent_rl/experiment.yaml`` alone on the tiny model, 40
  steps of 8 groups x 4 agent runs (the openai-SDK agent through the gateway), every step
  updating (``filter_zero_advantage=false``: the tiny model solves nothing); progress is
  ``metrics.jsonl``'s steps;
- ``serve``: ``trajforge serve --model tiny`` answering 5,000 chat requests from 16 concurrent
  openai-SDK clients on 127.0.0.1, conversations of 3 calls, half in a session of their own and
  half in the default session, every other one streamed;
- ``viewer``: ``trajforge view`` over a 100k-trajectory synthetic store (built as
  bench/viewer.py does) serving 10,000 page loads (table, trajectory, group and runs pages);
- ``eval``: ``trajforge eval --model embedded`` on 200 calculator tasks (multi-turn, 16 at a
  time); progress is the store's count.

Usage: .venv/bin/python bench/soak.py [--soak rl --soak serve ...] [--quick]

Prints one JSON line per soak (``ratio`` = end RSS / warm-up RSS, target <= 1.10) and exits 1
naming the figure if any soak grew beyond it.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml
from openai import AsyncOpenAI
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from trajforge.cli.failures import ExitCode
from viewer import _free_port, build_store, page_urls  # bench/viewer.py

ROOT = Path(__file__).resolve().parent.parent
TRAJFORGE = [sys.executable, "-m", "trajforge"]
WARMUP = 0.10
WINDOW = 0.05
LIMIT = 1.10
CLIENTS = 16
CALLS_PER_SESSION = 3
MB = 2**20
# Generous: the CPU is shared, and a loaded machine must make a soak slow, not fail it.
TIMEOUT = httpx.Timeout(600.0, connect=120.0)
console = Console(stderr=True)


@dataclass(frozen=True)
class Sizes:
    rl_steps: int
    rl_groups: int
    rl_samples: int
    rl_validation: int
    requests: int
    store: int
    distinct: int
    loads: int
    episodes: int


FULL = Sizes(40, 8, 4, 32, 5_000, 100_000, 10_000, 10_000, 200)
QUICK = Sizes(4, 2, 2, 2, 160, 2_000, 500, 200, 8)


def tree_rss(proc: psutil.Process) -> int:
    """Resident bytes of ``proc`` and every process below it (ones that exit meanwhile: 0)."""
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def high_water(pid: int) -> int:
    """The process's own peak resident set (``VmHWM``), bytes; 0 once it has exited."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@dataclass
class Sampler:
    """Samples (fraction of the work done, tree RSS) of a process in a thread."""

    pid: int
    done: Callable[[], float]
    interval: float
    on_sample: Callable[[float, int], None]
    samples: list[tuple[float, int]] = field(default_factory=list)
    hwm: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def _loop(self) -> None:
        proc = psutil.Process(self.pid)
        while not self._stop.is_set():
            try:
                fraction, rss = self.done(), tree_rss(proc)
            except psutil.NoSuchProcess:
                return
            self.samples.append((fraction, rss))
            self.on_sample(fraction, rss)
            self.hwm = max(self.hwm, high_water(self.pid))
            self._stop.wait(self.interval)

    @contextmanager
    def running(self) -> Iterator[Sampler]:
        thread = threading.Thread(target=self._loop, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()

    def result(self, name: str, duration_s: float, **extra: Any) -> dict[str, Any]:
        """The soak's JSON figures."""

        def highest(lo: float, hi: float) -> float:
            # Progress moves in steps (an RL step, an episode): the window starts at the first
            # level sampled at or past ``lo`` (the last one sampled if none is).
            levels = [f for f, _ in self.samples]
            if not levels:
                raise SystemExit(f"soak {name}: no RSS sample")
            start = min((f for f in levels if f >= lo), default=max(levels))
            return max(rss for f, rss in self.samples if start <= f <= max(start, hi)) / MB

        warm = highest(WARMUP, WARMUP + WINDOW)
        end = highest(1.0 - WINDOW, 1.0)
        peak = max(max(rss for _, rss in self.samples), self.hwm) / MB
        return {
            "soak": name,
            **extra,
            "warmup_at": f"{WARMUP:.0%}-{WARMUP + WINDOW:.0%} of the work",
            "warmup_rss_mb": round(warm, 1),
            "end_rss_mb": round(end, 1),
            "peak_rss_mb": round(peak, 1),
            "duration_s": round(duration_s, 1),
            "samples": len(self.samples),
            "ratio": round(end / warm, 3),
        }


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([*TRAJFORGE, *args], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


def finish(
    proc: subprocess.Popen[bytes], name: str, log: Path, ok: tuple[int, ...] = (ExitCode.OK,)
) -> None:
    """Wait for ``proc``; an exit status outside ``ok`` stops the bench with the log's tail."""
    if proc.wait() not in ok:
        tail = log.read_text(errors="replace")[-2000:]
        raise SystemExit(f"soak {name}: the process exited {proc.returncode}:\n{tail}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_up(url: str, proc: subprocess.Popen[bytes], name: str) -> None:
    deadline = time.monotonic() + 300
    while True:
        try:
            httpx.get(url, timeout=10)
            return
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"soak {name}: the server at {url} did not start") from None
            time.sleep(0.2)


@contextmanager
def watch(
    name: str, proc: subprocess.Popen[bytes], done: Callable[[], float], interval: float
) -> Iterator[Sampler]:
    """Sample ``proc`` while the block runs, with a Rich bar of the progress and the last RSS."""
    with Progress(
        TextColumn(f"[bold]{name}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%  {task.fields[rss]}"),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task(name, total=1.0, rss="")

        def show(fraction: float, rss: int) -> None:
            bar.update(task, completed=fraction, rss=f"{rss / MB:,.0f} MB")

        with Sampler(proc.pid, done, interval, show).running() as sampler:
            yield sampler


def rl_only(tmp: Path) -> Path:
    """``examples/agent_rl/experiment.yaml`` with its RL stage alone, which then starts from the
    base model (in the example it continues the SFT stage's weights)."""
    exp = yaml.safe_load((ROOT / "examples/agent_rl/experiment.yaml").read_text())
    exp["stages"] = [s for s in exp["stages"] if s.get("kind") == "rl"]
    path = tmp / "agent_rl_only.yaml"
    path.write_text(yaml.safe_dump(exp))
    return path


def soak_rl(sizes: Sizes, tmp: Path, interval: float) -> dict[str, Any]:
    out = tmp / "rl"
    metrics = out / "rl" / "metrics.jsonl"
    t = "stages.rl.train"
    proc = start(
        [
            "run", str(rl_only(tmp)), "model=tiny",
            f"{t}.steps={sizes.rl_steps}", f"{t}.groups_per_step={sizes.rl_groups}",
            f"{t}.samples_per_group={sizes.rl_samples}",
            f"{t}.validation.tasks={sizes.rl_validation}",
            f"{t}.model.lora.layers=null", f"{t}.filter_zero_advantage=false",
            "--out", str(out),
        ],
        tmp / "rl.log",
    )  # fmt: skip

    def done() -> float:
        try:
            return len(metrics.read_bytes().splitlines()) / sizes.rl_steps
        except OSError:
            return 0.0

    began = time.perf_counter()
    try:
        with watch("rl", proc, done, interval) as sampler:
            finish(proc, "rl", tmp / "rl.log")
    finally:
        stop(proc)  # an interrupted bench leaves no run behind
    return sampler.result(
        "rl", time.perf_counter() - began, model="tiny", steps=sizes.rl_steps,
        episodes_per_step=sizes.rl_groups * sizes.rl_samples,
    )  # fmt: skip


async def _clients(url: str, total: int, counter: list[int]) -> None:
    """``CLIENTS`` workers share ``total`` calls, in conversations of ``CALLS_PER_SESSION``
    calls, every other conversation streamed."""
    conversations = itertools.count()

    async def conversation(k: int, calls: int) -> None:
        # Half the conversations in a session of their own, half in the default one (no session
        # in the URL), which every such client shares.
        base = f"{url}/sessions/soak-{k}/v1" if k % 4 < 2 else f"{url}/v1"
        client = AsyncOpenAI(base_url=base, api_key="x", max_retries=0, timeout=TIMEOUT)
        messages: list[Any] = []
        for turn in range(calls):
            messages.append(
                {"role": "user", "content": f"Question {k}.{turn}: what is {k} + {turn}?"}
            )
            options: dict[str, Any] = {"model": "tiny", "messages": messages, "max_tokens": 16,
                                       "temperature": 1.0, "seed": k * 10 + turn}  # fmt: skip
            if k % 2:
                text = []
                async for chunk in await client.chat.completions.create(**options, stream=True):
                    text.extend(c.delta.content or "" for c in chunk.choices)
                reply = "".join(text)
            else:
                reply = (await client.chat.completions.create(**options)).choices[
                    0
                ].message.content or ""
            messages.append({"role": "assistant", "content": reply})
            counter[0] += 1
        await client.close()

    async def worker() -> None:
        while (k := next(conversations)) * CALLS_PER_SESSION < total:
            await conversation(k, min(CALLS_PER_SESSION, total - k * CALLS_PER_SESSION))

    await asyncio.gather(*(worker() for _ in range(CLIENTS)))


def soak_serve(sizes: Sizes, tmp: Path, interval: float) -> dict[str, Any]:
    port = _free_port()
    args = ["serve", "--model", "tiny", "--port", str(port), "--run", "soak"]
    proc = start([*args, "--store", str(tmp / "serve.db")], tmp / "serve.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_up(f"{url}/v1/models", proc, "serve")
        counter = [0]
        began = time.perf_counter()
        with watch("serve", proc, lambda: counter[0] / sizes.requests, interval) as sampler:
            asyncio.run(_clients(url, sizes.requests, counter))
            sampler.samples.append((1.0, tree_rss(psutil.Process(proc.pid))))
        duration = time.perf_counter() - began
    finally:
        stop(proc)
    return sampler.result("serve", duration, model="tiny", requests=sizes.requests, clients=CLIENTS)


def soak_viewer(sizes: Sizes, tmp: Path, interval: float) -> dict[str, Any]:
    db = tmp / "viewer.db"
    build_store(db, sizes.store, sizes.distinct, 2_000)
    urls = page_urls(sizes.store, sizes.distinct, sizes.loads // 2, random.Random(0))
    pages = urls["table"] + urls["trajectory"] + urls["group"] + urls["runs"]
    random.Random(1).shuffle(pages)
    pages = list(itertools.islice(itertools.cycle(pages), sizes.loads))
    port = _free_port()
    proc = start(["view", "--store", str(db), "--port", str(port)], tmp / "viewer.log")
    try:
        wait_up(f"http://127.0.0.1:{port}/api/runs", proc, "viewer")
        counter = [0]
        began = time.perf_counter()
        with (
            watch("viewer", proc, lambda: counter[0] / sizes.loads, interval) as sampler,
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client,
        ):
            for page in pages:
                response = client.get(page)
                if response.status_code != 200:
                    raise SystemExit(f"soak viewer: {page}: {response.status_code}")
                counter[0] += 1
            sampler.samples.append((1.0, tree_rss(psutil.Process(proc.pid))))
        duration = time.perf_counter() - began
    finally:
        stop(proc)
    return sampler.result("viewer", duration, trajectories=sizes.store, page_loads=sizes.loads)


def soak_eval(sizes: Sizes, tmp: Path, interval: float, model: str) -> dict[str, Any]:
    db = tmp / "eval.db"
    proc = start(
        [
            "eval", "--model", model, "--env", "calculator", "--tasks", str(sizes.episodes),
            "--concurrency", "16", "--max-new-tokens", "64", "--store", str(db), "--run", "soak",
        ],
        tmp / "eval.log",
    )  # fmt: skip

    def done() -> float:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
                (count,) = conn.execute(
                    "SELECT count(*) FROM trajectories WHERE run_id = 'soak'"
                ).fetchone()
        except sqlite3.Error:
            return 0.0
        return int(count) / sizes.episodes

    began = time.perf_counter()
    try:
        with watch("eval", proc, done, interval) as sampler:
            # Failed episodes (the tiny model's, all of them) are the eval's result, not the soak's.
            finish(proc, "eval", tmp / "eval.log", ok=(ExitCode.OK, ExitCode.PARTLY_FAILED))
    finally:
        stop(proc)
    return sampler.result(
        "eval", time.perf_counter() - began, model=model, env="calculator",
        episodes=sizes.episodes,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--soak", action="append", choices=["rl", "serve", "viewer", "eval"])
    parser.add_argument("--quick", action="store_true", help="small sizes (tests)")
    parser.add_argument("--eval-model", default="embedded", help="the eval soak's model")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    soaks: dict[str, Callable[[Path], dict[str, Any]]] = {
        "rl": lambda tmp: soak_rl(sizes, tmp, args.interval),
        "serve": lambda tmp: soak_serve(sizes, tmp, args.interval),
        "viewer": lambda tmp: soak_viewer(sizes, tmp, args.interval),
        "eval": lambda tmp: soak_eval(sizes, tmp, args.interval, args.eval_model),
    }
    grew = []
    for name in args.soak or list(soaks):
        with tempfile.TemporaryDirectory(prefix=f"trajforge-soak-{name}-") as tmp:
            result = soaks[name](Path(tmp))
        console.print(
            f"{name}: warm-up {result['warmup_rss_mb']:,.0f} MB, end {result['end_rss_mb']:,.0f}"
            f" MB, peak {result['peak_rss_mb']:,.0f} MB ({result['duration_s']:.0f} s)"
        )
        print(json.dumps(result), flush=True)
        if result["ratio"] > LIMIT:
            grew.append(
                f"soak {name}: RSS grew {result['ratio']:.3f}x (warm-up "
                f"{result['warmup_rss_mb']:,.0f} MB, end {result['end_rss_mb']:,.0f} MB), "
                f"above {LIMIT}"
            )
    if grew:
        raise SystemExit("\n".join(grew))


if __name__ == "__main__":
    main()
