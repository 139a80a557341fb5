"""Confined runs: each run of an agent program (a harness that executes whatever commands its
model asks for) in the bubblewrap sandbox of ``trajforge.envs``, in a folder of its own.

A run sees a read-only system (``/usr``, the ``/lib*`` folders, the interpreters), the files
its command line names and the folders ``Confinement.read_only`` adds, read-only at their own
paths, a fresh empty ``WORKSPACE`` (its working directory) and ``HOME`` (``~`` holds nothing of
the user's), both writable, and a private ``/tmp``. Nothing else of the host: not the user's
home, not other runs' folders. Its environment is the run's alone: what the agent contract tells
it (``agent_environment``: the session's URLs, the dummy key, the task) and what a harness recipe
sets; none of the caller's variables (keys, tokens) pass. Its network is a loopback of its own
where only the gateway's port answers (``relay``). A fresh unprivileged uid (where the host is
root) with rlimits bounds its processes, memory, CPU time and file sizes; the pid namespace ends
everything it started when it exits or is killed. The run's folder, with the config files the
recipe wrote, is removed when the run ends however it ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from trajforge.agent_programs.program import AgentExit, AgentLauncher
from trajforge.agent_programs.relay import FORWARDER, unix_relay
from trajforge.envs import Mount, SandboxConfig, episode_uid, sandbox_argv
from trajforge.errors import ConfigError

WORKSPACE = "/workspace"
HOME = "/home/agent"
_SOCKET_DIR = "/run/trajforge"
_SOCKET = "gateway.sock"
_LOCAL_HOST = "127.0.0.1"
_URL_VARS = ("OPENAI_BASE_URL", "TRAJFORGE_SESSION_URL")


class Confinement(BaseModel):
    """What a confined run is allowed: its limits and the host folders it may read."""

    model_config = ConfigDict(extra="forbid")

    read_only: list[Path] = Field(
        default_factory=list,
        description="host files or folders the run sees read-only at their own paths (a "
        "harness's install folder, data); the interpreters and /usr are always there",
    )
    max_processes: int = Field(
        default=256, ge=8, description="processes and threads of the run (RLIMIT_NPROC)"
    )
    memory_mb: int = Field(
        default=65536, ge=256, description="address space of each process (RLIMIT_AS)"
    )
    cpu_s: int = Field(default=3600, ge=1, description="CPU time of each process (RLIMIT_CPU)")
    max_file_mb: int = Field(default=1024, ge=1, description="largest file it may write")
    tmp_size_mb: int = Field(default=512, ge=1, description="size of its private /tmp")

    def sandbox(self) -> SandboxConfig:
        return SandboxConfig(
            memory_mb=self.memory_mb,
            cpu_s=self.cpu_s,
            max_processes=self.max_processes,
            max_file_mb=self.max_file_mb,
            tmp_size_mb=self.tmp_size_mb,
        )


@dataclass(frozen=True)
class RunSetup:
    """What one run adds to its command and environment (a harness's recipe)."""

    args: list[str] = field(default_factory=list)
    """Appended to the command line (the task's prompt, as a harness takes it)."""
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    """Written before the run starts, by their path in the sandbox (under ``WORKSPACE`` or
    ``HOME``), and removed with the run's folder."""


Setup = Callable[[Mapping[str, str]], RunSetup]
"""The setup of a run from what it is told, as it sees it inside (``inside_environment``)."""


def gateway_address(told: Mapping[str, str]) -> tuple[str, int]:
    """The gateway's host and port, from the session URL the run is told."""
    url = urlsplit(told["TRAJFORGE_SESSION_URL"])
    if url.hostname is None or url.port is None:
        raise ConfigError(f"TRAJFORGE_SESSION_URL: no host and port in {url.geturl()!r}")
    return url.hostname, url.port


def inside_environment(told: Mapping[str, str], port: int) -> dict[str, str]:
    """``told`` as the run sees it: the gateway at its port on the sandbox's own loopback."""
    env = dict(told)
    for var in _URL_VARS:
        if var in env:
            url = urlsplit(env[var])
            env[var] = url._replace(netloc=f"{_LOCAL_HOST}:{port}").geturl()
    return env


def _read_only_mounts(argv: list[str], confinement: Confinement) -> tuple[list[str], list[Mount]]:
    """The command line with the host files it names made absolute (the run starts in its
    workspace), and the read-only mounts that let the run see them and ``read_only``."""
    command, seen = [], []
    for arg in argv:
        path = Path(arg)
        if not arg.startswith("-") and path.exists():
            arg = str(path.resolve())
            seen.append(Path(arg))
        command.append(arg)
    seen += [p.resolve() for p in confinement.read_only]
    if sys.prefix != sys.base_prefix:
        seen.append(Path(sys.prefix).resolve())  # a virtual environment's ``python``
    for path in seen:
        if not path.exists():
            raise ConfigError(f"confine.read_only: {path} does not exist")
    mounts = [Mount(p, str(p)) for p in dict.fromkeys([*seen, FORWARDER])]
    return command, mounts


def _fill(root: Path, uid: int | None, files: Mapping[str, str]) -> list[Mount]:
    """The run's workspace and home made in ``root`` (owned by its uid) with ``files`` written
    in, and the folder of the gateway's socket; the mounts that show them to the run."""
    inside = {WORKSPACE: root / "workspace", HOME: root / "home"}
    for folder in inside.values():
        folder.mkdir()
    for target, text in files.items():
        base = next((b for b in inside if target.startswith(b + "/")), None)
        if base is None or ".." in Path(target).parts:
            raise ConfigError(f"run file {target}: write under {WORKSPACE} or {HOME}")
        path = inside[base] / target.removeprefix(base + "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "socket").mkdir()
    if uid is not None:
        for folder in inside.values():
            for path in [folder, *folder.rglob("*")]:
                os.chown(path, uid, uid)
    mounts = [Mount(inside[WORKSPACE], WORKSPACE, writable=True),
              Mount(inside[HOME], HOME, writable=True),
              Mount(root / "socket", _SOCKET_DIR)]  # fmt: skip
    return mounts


def confined(
    launch: AgentLauncher, confinement: Confinement, setup: Setup | None = None
) -> AgentLauncher:
    """``launch`` with every run confined (module docstring) and set up by ``setup``.

    Raises:
        SandboxUnavailableError: bubblewrap cannot run here (said now, naming why, rather than
            at every run; no run is ever started unconfined).
    """
    sandbox_argv(["/bin/true"], confinement.sandbox())

    async def launch_confined(
        argv: list[str], env: Mapping[str, str], stdin: str, timeout_s: float | None
    ) -> AgentExit:
        host, port = gateway_address(env)
        told = inside_environment(env, port)
        extra = setup(told) if setup is not None else RunSetup()
        command, read_only = _read_only_mounts(argv, confinement)
        uid = episode_uid()
        root = Path(tempfile.mkdtemp(prefix="trajforge-run-"))
        try:
            own = _fill(root, uid, extra.files)
            inside = {**told, **extra.env, "HOME": HOME, "TMPDIR": "/tmp"}
            socket = f"{_SOCKET_DIR}/{_SOCKET}"
            forwarded = [
                sys.executable,
                "-I",
                str(FORWARDER),
                str(port),
                socket,
                *command,
                *extra.args,
            ]
            bwrap = sandbox_argv(
                forwarded,
                confinement.sandbox(),
                mounts=(*read_only, *own),
                cwd=WORKSPACE,
                env=inside,
                uid=uid,
            )
            async with unix_relay(root / "socket" / _SOCKET, host, port):
                return await launch(bwrap, {}, stdin, timeout_s)
        finally:
            with contextlib.suppress(OSError):
                shutil.rmtree(root)

    return launch_confined
