"""One headless system Chromium process, owned end to end: started by us (never downloaded),
given a fresh profile in a run folder, and reachable over the DevTools protocol.

Nothing may outlive the run that started it, however the run ends:

- the process gets its own process group, so one ``killpg`` takes its renderers with it;
- it is started with ``PR_SET_PDEATHSIG`` = SIGKILL, so the kernel kills it when the thread
  that started it dies (a SIGKILL of the run included);
- its folder holds a pid file naming the owning process; ``reap_leftovers`` (called whenever a
  pool starts) kills what a dead owner left and removes its folder.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from trajforge.errors import InfraError

CHROMIUM_BINARY = os.environ.get("TRAJFORGE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--disable-sync",
    "--mute-audio",
    "--no-first-run",
    "--no-default-browser-check",
    "--password-store=basic",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)
START_TIMEOUT_S = 30.0
PID_FILE = "owner.json"
PROFILE = "profile"
# Chromium writes the DevTools port it chose, and the browser target's path, into this file.
PORT_FILE = "DevToolsActivePort"
_PR_SET_PDEATHSIG = 1


class BrowserStartError(InfraError):
    """Chromium did not start or did not open its DevTools endpoint."""


def first_line(exc: BaseException) -> str:
    """An exception's message without what follows its first line (Playwright's call log)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def run_root() -> Path:
    """The folder of this user's browser folders (one per running Chromium)."""
    root = Path(tempfile.gettempdir()) / f"trajforge-browsers-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    return root


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: the kernel SIGKILLs it when its parent dies.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _started_at(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _alive(pid: int, started: float) -> bool:
    """Whether ``pid`` is still the process that started at ``started`` (not a reused pid)."""
    now = _started_at(pid)
    return now is not None and abs(now - started) < 1.0


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


@dataclass
class Chromium:
    """A running Chromium: its process, its folder and its DevTools websocket URL."""

    process: subprocess.Popen[bytes]
    folder: Path
    ws_url: str

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the browser and its process group (safe from any thread, idempotent)."""
        _kill_group(self.process.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)

    def remove(self) -> None:
        """Kill it and delete its folder (profile and pid file)."""
        self.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


def _wait_for_port(process: subprocess.Popen[bytes], port_file: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BrowserStartError(f"chromium exited with status {process.returncode} at start")
        with contextlib.suppress(OSError):
            lines = port_file.read_text().split()
            if len(lines) == 2:
                return f"ws://127.0.0.1:{lines[0]}{lines[1]}"
        time.sleep(0.02)
    raise BrowserStartError(f"chromium opened no DevTools port within {START_TIMEOUT_S:.0f}s")


def launch(binary: str = CHROMIUM_BINARY, extra_flags: tuple[str, ...] = ()) -> Chromium:
    """Start a headless Chromium on a fresh profile; call from the thread that will own it
    (its death kills the browser).

    Raises:
        BrowserStartError: the binary is missing, exits at once, or opens no DevTools port.
    """
    if shutil.which(binary) is None:
        raise BrowserStartError(f"chromium: no executable {binary!r} (set TRAJFORGE_CHROMIUM)")
    folder = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=run_root()))
    profile = folder / PROFILE
    command = [binary, *CHROMIUM_FLAGS, *extra_flags, f"--user-data-dir={profile}", "about:blank"]
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise BrowserStartError(f"chromium: cannot start {binary}: {exc}") from exc
    owner = {
        "owner_pid": os.getpid(),
        "owner_started": _started_at(os.getpid()),
        "pid": process.pid,
        "started": _started_at(process.pid),
    }
    (folder / PID_FILE).write_text(json.dumps(owner))
    browser = Chromium(process, folder, "")
    try:
        browser.ws_url = _wait_for_port(process, profile / PORT_FILE)
    except BrowserStartError:
        browser.remove()
        raise
    return browser


def running_browsers() -> list[psutil.Process]:
    """The Chromiums and Playwright drivers under this process that still run (zombies, which
    are dead, left out): empty once every pool of the process is closed."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            ours = "chrom" in child.name() or "run-driver" in child.cmdline()
            if ours and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.Error:
            continue
    return found


def reap_leftovers(root: Path | None = None) -> int:
    """Kill the browsers whose owning run is gone and delete their folders; the number reaped.

    A folder without a readable pid file is left alone unless it is an hour old (a run may be
    writing it right now)."""
    reaped = 0
    for folder in (root or run_root()).iterdir():
        try:
            owner = json.loads((folder / PID_FILE).read_text())
        except (OSError, ValueError):
            if time.time() - folder.stat().st_mtime > 3600:
                shutil.rmtree(folder, ignore_errors=True)
            continue
        if owner.get("owner_started") and _alive(owner["owner_pid"], owner["owner_started"]):
            continue
        if owner.get("started") and _alive(owner["pid"], owner["started"]):
            _kill_group(owner["pid"])
        shutil.rmtree(folder, ignore_errors=True)
        reaped += 1
    return reaped
