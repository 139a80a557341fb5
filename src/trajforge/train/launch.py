"""``--num-processes N``: a command run as N training processes on this machine, joined over
127.0.0.1.

Each process gets the environment every launcher gives (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), from which accelerate joins the process
group; the rendezvous port is a free one. When a process fails the others end by themselves (a
collective with a dead peer fails, or times out after ``distributed.timeout_s``) and report their
own error; any still running ``grace_s`` later is stopped. Several machines use ``accelerate
launch`` or ``torchrun`` instead (docs/scaling.md). Nothing here imports torch: the CLI
imports it at start-up.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence

from trajforge.errors import ConfigError, TrajforgeError

_POLL_S = 0.1
_TERM_WAIT_S = 10.0


class DistributedError(TrajforgeError):
    """A process of a multi-process run failed (or another one did)."""


def launched_rank() -> int:
    """This process's rank as the launcher set it (0 without one)."""
    return int(os.environ.get("RANK", "0"))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rank_env(rank: int, world: int, port: int) -> dict[str, str]:
    """The environment of process ``rank`` of ``world`` (this process's, plus the launcher's)."""
    env = dict(os.environ)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    # N processes share the cores: without a cap each would start a thread per core.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // world)))
    return env


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def launch_local(
    command: Sequence[str], num_processes: int, *, grace_s: float, timeout_s: float | None = None
) -> None:
    """Run ``command`` as ``num_processes`` processes and wait for all of them (at most
    ``timeout_s`` seconds, then they are stopped).

    Raises:
        DistributedError: a process failed or the run timed out; the message names each rank
            and how it ended.
    """
    if num_processes < 1:
        raise ConfigError(f"--num-processes must be at least 1, got {num_processes}")
    port = free_port()
    procs = [
        subprocess.Popen(list(command), env=rank_env(rank, num_processes, port))
        for rank in range(num_processes)
    ]
    stopped: set[int] = set()
    end = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        timed_out = _wait(procs, grace_s, end, stopped)
    except BaseException:
        _stop(procs, stopped)
        raise
    if timed_out:
        raise DistributedError(
            f"training over {num_processes} processes did not end within {timeout_s:g} s: "
            f"ranks {sorted(stopped)} stopped"
        )
    failed = [
        f"rank {rank} "
        + ("stopped after the others failed" if rank in stopped else describe_exit(code))
        for rank, code in enumerate(p.returncode for p in procs)
        if code != 0
    ]
    if failed:
        raise DistributedError(
            f"training over {num_processes} processes failed: {'; '.join(failed)} "
            "(each process's own error is printed above; --resume continues from the last "
            "checkpoint, at any number of processes)"
        )


def _wait(
    procs: list[subprocess.Popen[bytes]], grace_s: float, end: float | None, stopped: set[int]
) -> bool:
    """Wait until every process ended, stopping those left ``grace_s`` after one failed;
    true if ``end`` came first (the processes are then stopped)."""
    deadline: float | None = None
    while True:
        codes = [p.poll() for p in procs]  # every process, each round
        if None not in codes:
            return False
        if deadline is None and any(code not in (None, 0) for code in codes):
            deadline = time.monotonic() + grace_s
        if deadline is not None and time.monotonic() > deadline:
            _stop(procs, stopped)
            return False
        if end is not None and time.monotonic() > end:
            _stop(procs, stopped)
            return True
        time.sleep(_POLL_S)


def _stop(procs: list[subprocess.Popen[bytes]], stopped: set[int]) -> None:
    """Terminate the processes still running (then kill those that ignore it)."""
    running = [(rank, p) for rank, p in enumerate(procs) if p.poll() is None]
    for rank, p in running:
        stopped.add(rank)
        p.terminate()
    for _, p in running:
        try:
            p.wait(timeout=_TERM_WAIT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
