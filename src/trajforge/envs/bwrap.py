"""How this host runs the sandbox under bubblewrap: the ``bwrap`` command line (a read-only
file system, a private ``/tmp``, fresh namespaces, a clean environment), the launcher that sets
the rlimits and, as root, drops to an unprivileged uid before it execs the command, and the
probe that finds the first mode that works here.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from trajforge.envs.sandbox_config import Mount, SandboxConfig

CHILD_ENV = {
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


@dataclass(frozen=True)
class Mode:
    """How this host runs the sandbox: bwrap flags and whether the launcher drops to a uid."""

    flags: tuple[str, ...]
    drop_uid: bool


def python_executable() -> Path:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidate = Path(sys.base_prefix) / "bin" / version
    return candidate if candidate.exists() else Path(os.path.realpath(sys.executable))


def _parent_dirs(target: Path) -> list[str]:
    """Flags that create ``target``'s parents 0755, so an unprivileged uid can reach a folder
    bound under e.g. /root (bwrap would create them unreachable)."""
    flags = []
    for parent in reversed(target.parents[:-1]):
        flags += ["--perms", "0755", "--dir", str(parent)]
    return flags


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
        flags += [*_parent_dirs(prefix), "--ro-bind", str(prefix), str(prefix)]
    if not python.is_relative_to(prefix) and not python.is_relative_to("/usr"):
        flags += ["--ro-bind", str(python), str(python)]
    return flags


@dataclass(frozen=True)
class Run:
    """What one sandboxed run executes, where, and as whom."""

    command: list[str]
    mounts: tuple[Mount, ...] = ()
    cwd: str = "/tmp"
    env: dict[str, str] = field(default_factory=dict)
    uid: int | None = None


def bwrap_argv(mode: Mode, config: SandboxConfig, python: Path, run: Run) -> list[str]:
    argv = ["bwrap", *mode.flags]
    argv += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    argv += ["--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    argv += _filesystem_flags(python)
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--size", str(config.tmp_size_mb << 20), "--perms", "1777", "--tmpfs", "/tmp"]
    for mount in run.mounts:
        argv += _parent_dirs(Path(mount.target))
        argv += ["--bind" if mount.writable else "--ro-bind", str(mount.source), mount.target]
    argv += ["--chdir", run.cwd, "--clearenv"]
    for key, value in {**CHILD_ENV, **run.env}.items():
        argv += ["--setenv", key, value]
    uid = run.uid if run.uid is not None else random.randrange(3_000_000, 4_000_000)
    return [*argv, str(python), *launcher_args(str(uid) if mode.drop_uid else "-", config, run)]


def launcher_args(uid: str, config: SandboxConfig, run: Run) -> list[str]:
    limits = [config.memory_mb << 20, config.cpu_s, config.max_processes, config.max_file_mb << 20]
    return ["-I", "-c", _LAUNCHER, uid, *map(str, limits), *run.command]


def python_run(python: Path, code: str) -> Run:
    return Run([str(python), "-I", "-u", "-c", code])


def _candidate_modes() -> list[Mode]:
    if os.geteuid() == 0:
        caps = ("--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID")
        return [Mode(flags=caps, drop_uid=True)]
    return [
        Mode(flags=("--unshare-user", "--disable-userns"), drop_uid=False),
        Mode(flags=("--unshare-user",), drop_uid=False),
    ]


@functools.cache
def probe() -> Mode | str:
    """The first sandbox mode that runs a trivial program here, or why none does (cached)."""
    if shutil.which("bwrap") is None:
        return (
            "bubblewrap is not installed; install it (Debian/Ubuntu: apt-get install bubblewrap, "
            "Fedora: dnf install bubblewrap) or set allow_unsandboxed=True for trusted code only"
        )
    python = python_executable()
    config = SandboxConfig()
    errors: list[str] = []
    for mode in _candidate_modes():
        argv = bwrap_argv(mode, config, python, python_run(python, "print('sandbox-ok')"))
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
