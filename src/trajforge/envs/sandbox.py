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
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from trajforge.errors import InfraError, TrajforgeError

log = logging.getLogger(__name__)

# argv strings are capped by the kernel at 128 KiB each (MAX_ARG_STRLEN); the code travels in argv.
MAX_CODE_BYTES = 100_000
_DRAIN_GRACE_S = 0.5
_READ_CHUNK = 65536
_CHILD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
}
# Runs first inside the sandbox: limits, then (as root only) a switch to an unprivileged uid,
# then exec of the command (a fresh interpreter on the model's code, a shell), so the command
# cannot undo any of it.
_LAUNCHER = """\
import os, resource, sys
uid, mem, cpu, nproc, fsize = sys.argv[1:6]
command = sys.argv[6:]
def cap(kind, soft, hard=None):
    resource.setrlimit(kind, (soft, soft if hard is None else hard))
cap(resource.RLIMIT_AS, int(mem))
cap(resource.RLIMIT_CPU, int(cpu), int(cpu) + 1)
cap(resource.RLIMIT_NPROC, int(nproc))
cap(resource.RLIMIT_FSIZE, int(fsize))
cap(resource.RLIMIT_CORE, 0)
cap(resource.RLIMIT_NOFILE, 256)
if uid != "-":
    os.setgroups([])
    os.setresgid(int(uid), int(uid), int(uid))
    os.setresuid(int(uid), int(uid), int(uid))
os.execv(command[0], command)
"""


class SandboxError(TrajforgeError):
    """The sandbox refused to run the code (e.g. it is too long)."""


class SandboxUnavailableError(SandboxError, InfraError):
    """The sandbox did not start: bubblewrap is missing, cannot create its namespaces on this
    machine, or its process could not be started (the machine's failure, not the code's)."""


class KillReason(StrEnum):
    TIMEOUT = "timeout"
    OUTPUT_LIMIT = "output_limit"
    CPU_LIMIT = "cpu_limit"
    FILE_SIZE_LIMIT = "file_size_limit"
    SIGNAL = "signal"


class SandboxConfig(BaseModel):
    """Limits of one sandboxed run."""

    model_config = ConfigDict(extra="forbid")

    timeout_s: float = Field(default=10.0, gt=0, description="wall-clock limit of the whole run")
    memory_mb: int = Field(default=512, ge=64, description="address-space limit (RLIMIT_AS)")
    cpu_s: int = Field(default=10, ge=1, description="CPU-time limit (RLIMIT_CPU)")
    max_processes: int = Field(default=32, ge=1, description="processes and threads (RLIMIT_NPROC)")
    max_output_bytes: int = Field(default=65536, ge=1, description="stdout + stderr cap")
    max_file_mb: int = Field(default=16, ge=1, description="largest file it may write")
    tmp_size_mb: int = Field(default=64, ge=1, description="size of the private /tmp")
    allow_unsandboxed: bool = Field(
        default=False,
        description="UNSAFE: run with rlimits only when bubblewrap is unavailable (trusted code)",
    )


class SandboxResult(BaseModel):
    """What a run produced. ``exit_code`` is negative (-signal) when a signal ended it."""

    model_config = ConfigDict(extra="forbid")

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    killed_reason: KillReason | None = None
    duration_s: float = 0.0
    sandboxed: bool = True

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.killed_reason is None

    def summary(self) -> str:
        """One line saying how the run ended, e.g. for a tool message."""
        match self.killed_reason:
            case KillReason.TIMEOUT:
                return f"killed: wall-clock time limit exceeded ({self.duration_s:.1f} s)"
            case KillReason.OUTPUT_LIMIT:
                return "killed: output limit exceeded (output truncated)"
            case KillReason.CPU_LIMIT:
                return "killed: CPU time limit exceeded"
            case KillReason.FILE_SIZE_LIMIT:
                return "killed: file size limit exceeded"
            case KillReason.SIGNAL:
                return f"killed by signal {_signal_name(-(self.exit_code or 0))}"
        return f"exit code {self.exit_code}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


@dataclass(frozen=True)
class Mount:
    """A host folder seen inside the sandbox at ``target``, read-only unless ``writable``."""

    source: Path
    target: str
    writable: bool = False


@dataclass(frozen=True)
class _Mode:
    """How this host runs the sandbox: bwrap flags and whether the launcher drops to a uid."""

    flags: tuple[str, ...]
    drop_uid: bool


def _python_executable() -> Path:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidate = Path(sys.base_prefix) / "bin" / version
    return candidate if candidate.exists() else Path(os.path.realpath(sys.executable))


def _filesystem_flags(python: Path) -> list[str]:
    flags = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", name)
        if path.is_symlink():
            flags += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            flags += ["--ro-bind", str(path), str(path)]
    prefix = Path(sys.base_prefix).resolve()
    roots = [Path("/usr")] + [Path("/", n) for n in ("bin", "lib", "lib64")]
    if not any(prefix == r or r in prefix.parents for r in roots):
        # Parents are created 0755 so an unprivileged uid can reach a prefix under e.g. /root.
        for parent in reversed(prefix.parents[:-1]):
            flags += ["--perms", "0755", "--dir", str(parent)]
        flags += ["--ro-bind", str(prefix), str(prefix)]
    if not python.is_relative_to(prefix) and not python.is_relative_to("/usr"):
        flags += ["--ro-bind", str(python), str(python)]
    return flags


@dataclass(frozen=True)
class _Run:
    """What one sandboxed run executes, where, and as whom."""

    command: list[str]
    mounts: tuple[Mount, ...] = ()
    cwd: str = "/tmp"
    env: dict[str, str] = field(default_factory=dict)
    uid: int | None = None


def _bwrap_argv(mode: _Mode, config: SandboxConfig, python: Path, run: _Run) -> list[str]:
    argv = ["bwrap", *mode.flags]
    argv += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    argv += ["--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    argv += _filesystem_flags(python)
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--size", str(config.tmp_size_mb << 20), "--perms", "1777", "--tmpfs", "/tmp"]
    for mount in run.mounts:
        argv += ["--bind" if mount.writable else "--ro-bind", str(mount.source), mount.target]
    argv += ["--chdir", run.cwd, "--clearenv"]
    for key, value in {**_CHILD_ENV, **run.env}.items():
        argv += ["--setenv", key, value]
    uid = run.uid if run.uid is not None else random.randrange(3_000_000, 4_000_000)
    return [*argv, str(python), *_launcher_args(str(uid) if mode.drop_uid else "-", config, run)]


def _launcher_args(uid: str, config: SandboxConfig, run: _Run) -> list[str]:
    limits = [config.memory_mb << 20, config.cpu_s, config.max_processes, config.max_file_mb << 20]
    return ["-I", "-c", _LAUNCHER, uid, *map(str, limits), *run.command]


def _python_run(python: Path, code: str) -> _Run:
    return _Run([str(python), "-I", "-u", "-c", code])


def _candidate_modes() -> list[_Mode]:
    if os.geteuid() == 0:
        caps = ("--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID")
        return [_Mode(flags=caps, drop_uid=True)]
    return [
        _Mode(flags=("--unshare-user", "--disable-userns"), drop_uid=False),
        _Mode(flags=("--unshare-user",), drop_uid=False),
    ]


@functools.cache
def _probe() -> _Mode | str:
    """The first sandbox mode that runs a trivial program here, or why none does (cached)."""
    if shutil.which("bwrap") is None:
        return (
            "bubblewrap is not installed; install it (Debian/Ubuntu: apt-get install bubblewrap, "
            "Fedora: dnf install bubblewrap) or set allow_unsandboxed=True for trusted code only"
        )
    python = _python_executable()
    config = SandboxConfig()
    errors: list[str] = []
    for mode in _candidate_modes():
        argv = _bwrap_argv(mode, config, python, _python_run(python, "print('sandbox-ok')"))
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"}
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            errors.append(str(exc))
            continue
        if done.returncode == 0 and done.stdout.strip() == "sandbox-ok":
            return mode
        errors.append((done.stderr.strip() or f"exit code {done.returncode}")[-500:])
    return (
        f"bubblewrap cannot create a sandbox here ({'; '.join(errors)}); it needs user "
        "namespaces: allow them (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 "
        "kernel.apparmor_restrict_unprivileged_userns=0) or run in a container that permits "
        "them, or set allow_unsandboxed=True for trusted code only"
    )


def sandbox_available() -> bool:
    """True when bubblewrap works on this machine (probed once)."""
    return isinstance(_probe(), _Mode)


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
    return await _run(_python_run(_python_executable(), code), config or SandboxConfig())


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
    run = _Run(list(command), mounts, cwd, dict(env or {}), uid)
    return await _run(run, config or SandboxConfig(), needs_bwrap=bool(mounts))


def episode_uid() -> int | None:
    """A fresh unprivileged uid for an episode's runs where the host is root (the sandbox then
    drops to it; folders the runs share must be its), else ``None`` (bubblewrap maps the
    host user)."""
    mode = _probe()
    if isinstance(mode, _Mode) and mode.drop_uid:
        return random.randrange(3_000_000, 4_000_000)
    return None


async def _run(run: _Run, config: SandboxConfig, *, needs_bwrap: bool = False) -> SandboxResult:
    if any(len(a.encode("utf-8", errors="surrogatepass")) > MAX_CODE_BYTES for a in run.command):
        raise SandboxError(f"the code is longer than the sandbox's {MAX_CODE_BYTES}-byte limit")
    mode = await asyncio.to_thread(_probe)
    python = _python_executable()
    workdir: str | None = None
    if isinstance(mode, _Mode):
        argv = _bwrap_argv(mode, config, python, run)
        env = {"PATH": "/usr/bin:/bin"}
    elif config.allow_unsandboxed and not needs_bwrap:
        log.warning("UNSAFE: running code WITHOUT a sandbox (rlimits only): %s", mode)
        workdir = tempfile.mkdtemp(prefix="trajforge-unsafe-")
        argv = [str(python), *_launcher_args("-", config, run)]
        env = {**_CHILD_ENV, **run.env, "HOME": workdir, "TMPDIR": workdir}
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
