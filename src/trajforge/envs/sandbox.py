"""Run model-written Python in a separate process under bubblewrap.

The child sees a read-only file system made of ``/usr``, the ``/lib*`` directories and the
interpreter's prefix, a private size-limited tmpfs at ``/tmp`` (its only writable path and its
working directory), a fresh ``/proc`` and a minimal ``/dev``. It has no network (own network
namespace), its own pid/ipc/uts namespaces, a clean environment, and rlimits on address space,
CPU time, processes, file size and core dumps. A wall-clock timeout and an output cap kill the
whole sandbox: killing the outer ``bwrap`` takes down the pid namespace, and everything in it.

When the host user is root, the sandbox does not use a user namespace (root's processes are
exempt from ``RLIMIT_NPROC``); instead a small launcher drops to a fresh unprivileged uid inside
the namespaces before running the code, with ``no_new_privs`` set by bubblewrap. Otherwise
bubblewrap creates an unprivileged user namespace and further namespaces are disabled inside.

Here is a run from start to end (the probe, the unsandboxed fallback, the timeout and output
cap); the ``bwrap`` command line and the launcher are ``bwrap.py``, the limits and results
``sandbox_config.py`` (re-exported here).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import random
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field

from trajforge.envs.bwrap import (
    CHILD_ENV,
    Mode,
    Run,
    bwrap_argv,
    launcher_args,
    probe,
    python_executable,
    python_run,
)
from trajforge.envs.sandbox_config import (
    KillReason,
    Mount,
    SandboxConfig,
    SandboxError,
    SandboxResult,
    SandboxUnavailableError,
)

__all__ = [
    "MAX_CODE_BYTES",
    "KillReason",
    "Mount",
    "SandboxConfig",
    "SandboxError",
    "SandboxResult",
    "SandboxUnavailableError",
    "episode_uid",
    "run_command",
    "run_python",
    "run_python_sync",
    "sandbox_argv",
    "sandbox_available",
]

log = logging.getLogger(__name__)

# argv strings are capped by the kernel at 128 KiB each (MAX_ARG_STRLEN); the code travels in argv.
MAX_CODE_BYTES = 100_000
SANDBOX_PATH = "/usr/bin:/bin"
"""The PATH inside the sandbox: the system's own binaries (its python3), never a venv's."""
_DRAIN_GRACE_S = 0.5
_READ_CHUNK = 65536


def sandbox_available() -> bool:
    """True when bubblewrap works on this machine (probed once)."""
    return isinstance(probe(), Mode)


@dataclass
class _Output:
    """Bytes read from the child's pipes, capped at ``limit`` in total."""

    limit: int
    chunks: dict[str, bytearray] = field(
        default_factory=lambda: {"stdout": bytearray(), "stderr": bytearray()}
    )
    total: int = 0
    overflow: asyncio.Event = field(default_factory=asyncio.Event)

    async def pump(self, name: str, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(_READ_CHUNK):
            room = self.limit - self.total
            self.chunks[name] += chunk[: max(room, 0)]
            self.total += len(chunk)
            if self.total > self.limit:
                # Keep reading (and dropping) until EOF so the pipe transport can close.
                self.overflow.set()

    def text(self, name: str) -> str:
        return self.chunks[name].decode("utf-8", errors="replace")


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def run_python(code: str, config: SandboxConfig | None = None) -> SandboxResult:
    """Run ``code`` with ``python -I -u -c`` in the sandbox and collect what it printed.

    Raises:
        SandboxError: the code is too long or holds a NUL byte.
        SandboxUnavailableError: bubblewrap cannot run here and ``allow_unsandboxed`` is off,
            or the sandbox's process could not be started.
    """
    if "\x00" in code:
        raise SandboxError("the code contains a NUL byte, which Python source cannot hold")
    return await _run(python_run(python_executable(), code), config or SandboxConfig())


async def run_command(
    command: list[str],
    config: SandboxConfig | None = None,
    *,
    mounts: tuple[Mount, ...] = (),
    cwd: str = "/tmp",
    env: dict[str, str] | None = None,
    uid: int | None = None,
) -> SandboxResult:
    """Run ``command`` (an argv, e.g. ``["/bin/bash", "-c", script]``) in the sandbox with the
    host folders ``mounts`` in it, from ``cwd``, with ``env`` added to the clean environment,
    as ``uid`` where the host is root (``episode_uid``; a fresh one per run otherwise).
    Folders need bubblewrap: ``allow_unsandboxed`` runs only mount-less commands.

    Raises:
        SandboxError: an argument is too long or holds a NUL byte.
        SandboxUnavailableError: as ``run_python``, or mounts asked of an unsandboxed run.
    """
    if any("\x00" in arg for arg in command):
        raise SandboxError("the command contains a NUL byte, which no argument can hold")
    run = Run(list(command), mounts, cwd, dict(env or {}), uid)
    return await _run(run, config or SandboxConfig(), needs_bwrap=bool(mounts))


def sandbox_argv(
    command: list[str],
    config: SandboxConfig,
    *,
    mounts: tuple[Mount, ...] = (),
    cwd: str = "/tmp",
    env: dict[str, str] | None = None,
    uid: int | None = None,
) -> list[str]:
    """The ``bwrap`` command line that runs ``command`` as ``run_command`` would, for a caller
    that starts, feeds and watches the process itself (an agent program's launcher); it has
    ``config``'s rlimits but not its timeout or output cap, which are the caller's.

    Raises:
        SandboxUnavailableError: bubblewrap cannot run here (``allow_unsandboxed`` is not
            honoured: the caller asked for a sandbox).
    """
    mode = probe()
    if not isinstance(mode, Mode):
        raise SandboxUnavailableError(mode)
    run = Run(list(command), mounts, cwd, dict(env or {}), uid)
    return bwrap_argv(mode, config, python_executable(), run)


def episode_uid() -> int | None:
    """A fresh unprivileged uid for an episode's runs where the host is root (the sandbox then
    drops to it; folders the runs share must be its), else ``None`` (bubblewrap maps the
    host user)."""
    mode = probe()
    if isinstance(mode, Mode) and mode.drop_uid:
        return random.randrange(3_000_000, 4_000_000)
    return None


async def _run(run: Run, config: SandboxConfig, *, needs_bwrap: bool = False) -> SandboxResult:
    if any(len(a.encode("utf-8", errors="surrogatepass")) > MAX_CODE_BYTES for a in run.command):
        raise SandboxError(f"the code is longer than the sandbox's {MAX_CODE_BYTES}-byte limit")
    mode = await asyncio.to_thread(probe)
    python = python_executable()
    workdir: str | None = None
    if isinstance(mode, Mode):
        argv = bwrap_argv(mode, config, python, run)
        env = {"PATH": SANDBOX_PATH}
    elif config.allow_unsandboxed and not needs_bwrap:
        log.warning("UNSAFE: running code WITHOUT a sandbox (rlimits only): %s", mode)
        workdir = tempfile.mkdtemp(prefix="trajforge-unsafe-")
        argv = [str(python), *launcher_args("-", config, run)]
        env = {**CHILD_ENV, **run.env, "HOME": workdir, "TMPDIR": workdir}
    else:
        raise SandboxUnavailableError(mode)
    try:
        result = await _execute(argv, env, workdir, config)
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    result.sandboxed = workdir is None
    return result


async def _execute(
    argv: list[str], env: dict[str, str], cwd: str | None, config: SandboxConfig
) -> SandboxResult:
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        raise SandboxUnavailableError(f"the sandbox did not start: {exc}") from None
    assert proc.stdout is not None and proc.stderr is not None
    output = _Output(limit=config.max_output_bytes)
    readers = asyncio.gather(output.pump("stdout", proc.stdout), output.pump("stderr", proc.stderr))
    exited = asyncio.ensure_future(proc.wait())
    overflowed = asyncio.ensure_future(output.overflow.wait())
    reason: KillReason | None = None
    try:
        await asyncio.wait(
            {exited, overflowed}, timeout=config.timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if not exited.done():
            reason = KillReason.OUTPUT_LIMIT if output.overflow.is_set() else KillReason.TIMEOUT
            _kill_group(proc.pid)
        await exited
        try:
            await asyncio.wait_for(asyncio.shield(readers), _DRAIN_GRACE_S)
        except TimeoutError:
            # Something outside the pid namespace (unsandboxed mode) still holds the pipes.
            _kill_group(proc.pid)
    finally:
        _kill_group(proc.pid)
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        readers.cancel()
        overflowed.cancel()
        await asyncio.gather(readers, overflowed, return_exceptions=True)
        # Pipes still held open by a stray process would otherwise keep the transport alive
        # past the event loop; asyncio offers no public close() on Process.
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            transport.close()
    if reason is None and output.overflow.is_set():
        reason = KillReason.OUTPUT_LIMIT
    exit_code = _normalise_exit(proc.returncode, sandboxed=cwd is None)
    if reason is None and exit_code is not None and exit_code < 0:
        reason = {
            -signal.SIGXCPU: KillReason.CPU_LIMIT,
            -signal.SIGXFSZ: KillReason.FILE_SIZE_LIMIT,
        }.get(exit_code, KillReason.SIGNAL)
    return SandboxResult(
        stdout=output.text("stdout"),
        stderr=output.text("stderr"),
        exit_code=None if reason in (KillReason.TIMEOUT, KillReason.OUTPUT_LIMIT) else exit_code,
        timed_out=reason is KillReason.TIMEOUT,
        killed_reason=reason,
        duration_s=time.monotonic() - started,
    )


def _normalise_exit(code: int | None, *, sandboxed: bool) -> int | None:
    """bwrap reports a child killed by signal N as exit status 128 + N; map that to -N."""
    if code is not None and sandboxed and 128 < code <= 128 + 64:
        return 128 - code
    return code


def run_python_sync(code: str, config: SandboxConfig | None = None) -> SandboxResult:
    """Blocking ``run_python``; safe to call from inside a running event loop (uses a thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_python(code, config))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, run_python(code, config)).result()
