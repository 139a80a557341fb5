"""Escapes and abuses of the code sandbox: each one must be contained.

Every case puts a unique marker in the code (it travels in the child's argv), and afterwards
scans ``/proc`` for any process whose command line still carries it.
"""

from __future__ import annotations

import ast
import logging
import os
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trajforge.envs import sandbox
from trajforge.envs.sandbox import (
    KillReason,
    SandboxConfig,
    SandboxError,
    SandboxResult,
    SandboxUnavailableError,
    run_python_sync,
)

PROJECT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not sandbox.sandbox_available(),
    reason="bubblewrap cannot run here (apt-get install bubblewrap)",
)


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


def _assert_no_leftovers(marker: str) -> None:
    deadline = time.monotonic() + 2.0
    while (left := _processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"processes left behind: {left}"


@pytest.fixture
def run() -> Iterator[Callable[..., SandboxResult]]:
    """Run code with small limits, a marker comment appended; check nothing is left behind."""
    markers: list[str] = []

    def _run(code: str, **limits: object) -> SandboxResult:
        marker = f"tfmark{uuid.uuid4().hex}"
        markers.append(marker)
        settings: dict = {"timeout_s": 2.0, "cpu_s": 2, "memory_mb": 256, "max_processes": 16}
        settings.update(limits)
        config = SandboxConfig(max_output_bytes=20_000, **settings)
        source = textwrap.dedent(code).replace("MARKER", marker) + f"\n# {marker}\n"
        started = time.monotonic()
        result = run_python_sync(source, config)
        assert time.monotonic() - started < config.timeout_s + 2.0, "not contained in time"
        return result

    yield _run
    for marker in markers:
        _assert_no_leftovers(marker)


def _ran_and_printed(result: SandboxResult, text: str) -> None:
    assert result.exit_code == 0 and result.killed_reason is None, result.stderr
    assert text in result.stdout, (result.stdout, result.stderr)


# --- ordinary use -------------------------------------------------------------------------


def test_runs_code_and_reports_output_and_errors(run: Callable[..., SandboxResult]) -> None:
    ok = run("print(sum(range(10)))\nimport sys; print('warn', file=sys.stderr)")
    assert ok.ok and ok.stdout == "45\n" and ok.stderr == "warn\n" and ok.sandboxed
    failed = run("1/0")
    assert failed.exit_code == 1 and "ZeroDivisionError" in failed.stderr
    assert failed.summary() == "exit code 1"


def test_refuses_code_it_cannot_pass() -> None:
    with pytest.raises(SandboxError, match="NUL"):
        run_python_sync("print(1)\x00")
    with pytest.raises(SandboxError, match="byte limit"):
        run_python_sync("#" * (sandbox.MAX_CODE_BYTES + 1))


# --- network ------------------------------------------------------------------------------


def test_cannot_reach_a_host_socket_on_localhost(run: Callable[..., SandboxResult]) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.2)
        port = server.getsockname()[1]
        result = run(
            f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=1)
                print("CONNECTED")
            except OSError as exc:
                print("refused", type(exc).__name__)
            """
        )
        _ran_and_printed(result, "refused")
        with pytest.raises(TimeoutError):
            server.accept()


def test_dns_and_external_addresses_fail(run: Callable[..., SandboxResult]) -> None:
    result = run(
        """
        import socket
        for host in ("example.com", "pypi.org"):
            try:
                socket.getaddrinfo(host, 443)
                print("RESOLVED", host)
            except OSError:
                print("no dns", host)
        try:
            socket.create_connection(("192.0.2.1", 80), timeout=1)
            print("CONNECTED")
        except OSError as exc:
            print("unreachable", exc.errno)
        """
    )
    _ran_and_printed(result, "unreachable")
    assert "RESOLVED" not in result.stdout and "CONNECTED" not in result.stdout
    assert result.stdout.count("no dns") == 2


# --- file system --------------------------------------------------------------------------


def test_writes_outside_the_temp_dir_do_not_reach_the_host(
    run: Callable[..., SandboxResult],
) -> None:
    name = f"tf-escape-{uuid.uuid4().hex}"
    targets = [Path("/tmp") / name, Path("/") / name, PROJECT / name, Path.home() / name]
    result = run(
        f"""
        for path in {[str(t) for t in targets]!r} + ["/usr/{name}", "/proc/{name}"]:
            try:
                with open(path, "w") as fh:
                    fh.write("escaped")
                print("wrote", path)
            except OSError as exc:
                print("refused", path, exc.errno)
        """
    )
    assert result.ok, result.stderr
    for target in targets:
        assert not target.exists(), f"{target} was written on the host"
    # The sandbox's own /tmp is private and writable; nothing else is.
    assert f"wrote /tmp/{name}" in result.stdout
    assert result.stdout.count("refused") == 5


def test_secrets_are_not_readable(run: Callable[..., SandboxResult]) -> None:
    paths = ["/etc/shadow", "/etc/passwd", "/root/.bash_history", str(PROJECT / "pyproject.toml")]
    paths += [str(Path.home() / ".ssh/id_rsa"), "/proc/1/environ", "/proc/1/root/etc/shadow"]
    result = run(
        f"""
        import os
        for path in {paths!r}:
            try:
                data = open(path, "rb").read()
                print("READ", path, len(data))
            except OSError as exc:
                print("denied", path, exc.errno)
        print("root holds", sorted(os.listdir("/root")) if os.path.isdir("/root") else None)
        """
    )
    assert result.ok, result.stderr
    assert "READ" not in result.stdout
    assert result.stdout.count("denied") == len(paths)
    assert "root holds ['.pyenv']" in result.stdout or "root holds None" in result.stdout


def test_environment_secrets_do_not_leak(
    run: Callable[..., SandboxResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"sk-fake-{uuid.uuid4().hex}"
    monkeypatch.setenv("TRAJFORGE_FAKE_API_KEY", secret)
    result = run(
        """
        import os
        print(dict(os.environ))
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    print(open(f"/proc/{pid}/environ", "rb").read())
                except OSError:
                    pass
        """
    )
    assert result.ok, result.stderr
    assert secret not in result.stdout and "TRAJFORGE_FAKE_API_KEY" not in result.stdout
    assert "'HOME': '/tmp'" in result.stdout


def test_symlink_tricks_stay_inside(run: Callable[..., SandboxResult]) -> None:
    outside = PROJECT / f"tf-link-{uuid.uuid4().hex}"
    result = run(
        f"""
        import os
        os.symlink({str(PROJECT / "pyproject.toml")!r}, "/tmp/link")
        os.symlink({str(outside)!r}, "/tmp/wlink")
        os.symlink("/proc/1/root", "/tmp/rootlink")
        for probe in ("/tmp/link", "/tmp/rootlink/etc/shadow"):
            try:
                print("READ", len(open(probe).read()))
            except OSError as exc:
                print("denied", exc.errno)
        try:
            open("/tmp/wlink", "w").write("escaped")
            print("WROTE")
        except OSError as exc:
            print("denied", exc.errno)
        """
    )
    assert result.ok, result.stderr
    assert result.stdout.count("denied") == 3 and "READ" not in result.stdout
    assert not outside.exists()


def test_devices_and_kernel_interfaces_are_out_of_reach(
    run: Callable[..., SandboxResult],
) -> None:
    result = run(
        """
        import os
        print("dev", sorted(os.listdir("/dev")))
        for path in ("/dev/mem", "/dev/sda", "/dev/kmsg", "/sys/kernel", "/proc/sysrq-trigger"):
            try:
                open(path, "wb").write(b"b")
                print("WROTE", path)
            except OSError as exc:
                print("denied", path, exc.errno)
        """
    )
    assert result.ok, result.stderr
    assert "WROTE" not in result.stdout and result.stdout.count("denied") == 5
    assert "'sda'" not in result.stdout and "'mem'" not in result.stdout


def test_huge_file_and_full_temp_dir_are_refused(run: Callable[..., SandboxResult]) -> None:
    big = run("open('/tmp/big', 'wb').write(b'x' * (50 << 20))", max_file_mb=4, memory_mb=512)
    assert big.exit_code == 1 and "File too large" in big.stderr
    many = run(
        """
        for i in range(100):
            with open(f"/tmp/f{i}", "wb") as fh:
                fh.write(b"x" * (3 << 20))
        """,
        max_file_mb=4,
        tmp_size_mb=8,
    )
    assert many.exit_code == 1 and "No space left on device" in many.stderr


# --- resources ----------------------------------------------------------------------------


def test_fork_bomb_is_contained(run: Callable[..., SandboxResult]) -> None:
    result = run(
        """
        import os, time
        while True:
            try:
                os.fork()
            except OSError:
                time.sleep(0.01)
        """,
        timeout_s=2.0,
    )
    assert result.timed_out and result.killed_reason is KillReason.TIMEOUT
    assert subprocess.run(["true"], check=False).returncode == 0


def test_fork_limit_is_reported(run: Callable[..., SandboxResult]) -> None:
    result = run(
        """
        import os
        children = 0
        try:
            for _ in range(100):
                if os.fork() == 0:
                    import time; time.sleep(5); os._exit(0)
                children += 1
        except OSError as exc:
            print("fork refused after", children, exc.errno)
        """,
        max_processes=8,
    )
    _ran_and_printed(result, "fork refused after")
    assert int(result.stdout.split()[3]) < 8


def test_allocating_10_gb_fails(run: Callable[..., SandboxResult]) -> None:
    result = run("x = bytearray(10 * 2**30)\nprint('ALLOCATED')")
    assert result.exit_code == 1 and "MemoryError" in result.stderr
    assert "ALLOCATED" not in result.stdout


def test_spinning_is_stopped_by_the_cpu_limit(run: Callable[..., SandboxResult]) -> None:
    # A generous wall clock: on a busy machine one CPU second can take several real ones.
    result = run("while True:\n    pass", cpu_s=1, timeout_s=10.0)
    assert result.killed_reason is KillReason.CPU_LIMIT, result
    assert result.summary() == "killed: CPU time limit exceeded"


def test_sleeping_forever_hits_the_wall_clock(run: Callable[..., SandboxResult]) -> None:
    result = run("import time\ntime.sleep(10**6)", timeout_s=1.0)
    assert result.timed_out and result.exit_code is None
    assert 1.0 <= result.duration_s < 2.5
    assert result.summary().startswith("killed: wall-clock time limit exceeded")


def test_printing_1_gb_is_cut_off(run: Callable[..., SandboxResult]) -> None:
    result = run(
        """
        import sys
        chunk = "x" * (1 << 20)
        for _ in range(1024):
            sys.stdout.write(chunk)
        """,
        timeout_s=3.0,
    )
    assert result.killed_reason is KillReason.OUTPUT_LIMIT
    assert len(result.stdout) <= 20_000 and result.duration_s < 2.0


def test_many_threads_are_refused(run: Callable[..., SandboxResult]) -> None:
    result = run(
        """
        import threading, time
        started = 0
        try:
            for _ in range(1000):
                threading.Thread(target=time.sleep, args=(3,), daemon=True).start()
                started += 1
        except RuntimeError as exc:
            print("refused after", started, exc)
        """,
        max_processes=16,
    )
    _ran_and_printed(result, "refused after")
    assert int(result.stdout.split()[2]) < 16


# --- processes ----------------------------------------------------------------------------


def test_background_daemon_dies_with_the_run(run: Callable[..., SandboxResult]) -> None:
    result = run(
        """
        import os, subprocess, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(60)
            os._exit(0)
        subprocess.Popen(["sh", "-c", "sleep 60 # MARKER"], start_new_session=True)
        print("main exits")
        """,
        timeout_s=5.0,
    )
    _ran_and_printed(result, "main exits")
    assert result.duration_s < 3.0  # it did not wait for the 60 s sleepers, nor the timeout


def test_subprocess_shell_is_confined(run: Callable[..., SandboxResult]) -> None:
    result = run(
        """
        import subprocess
        out = subprocess.run(
            ["sh", "-c", "echo shell-ran; cat /etc/shadow; ls /work /root/.ssh; id -u"],
            capture_output=True, text=True,
        )
        print(out.stdout, out.stderr)
        subprocess.Popen(["sh", "-c", "sleep 60 # MARKER"])
        import time; time.sleep(60)
        """,
        timeout_s=1.5,
    )
    assert result.timed_out
    assert "shell-ran" in result.stdout and "No such file" in result.stdout
    assert "root:" not in result.stdout


def test_killing_init_parent_or_host_processes_fails(run: Callable[..., SandboxResult]) -> None:
    result = run(
        f"""
        import os, signal
        for pid in ({os.getpid()}, {os.getppid()}, 1, os.getppid()):
            try:
                os.kill(pid, signal.SIGKILL)
                print("sent", pid)
            except OSError as exc:
                print("denied", pid, exc.errno)
        print("alive")
        """
    )
    assert "alive" in result.stdout, result.stderr
    assert f"denied {os.getpid()}" in result.stdout and f"denied {os.getppid()}" in result.stdout
    assert subprocess.run([sys.executable, "-c", "pass"], check=False).returncode == 0


def test_host_processes_are_invisible(run: Callable[..., SandboxResult]) -> None:
    result = run("import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    assert result.ok, result.stderr
    assert max(ast.literal_eval(result.stdout)) < 10  # a fresh pid namespace holds only the sandbox


def test_privilege_and_namespace_escapes_fail(run: Callable[..., SandboxResult]) -> None:
    name = f"tf-ns-{uuid.uuid4().hex}"
    result = run(
        f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        for label, attempt in [
            ("setuid", lambda: os.setuid(0)),
            ("setgid", lambda: os.setgid(0)),
            ("chroot", lambda: os.chroot("/tmp")),
        ]:
            try:
                attempt()
                print("ESCALATED", label)
            except OSError as exc:
                print("denied", label, exc.errno)
        print("ptrace", libc.ptrace(16, 1, None, None), ctypes.get_errno())
        print("unshare-net", libc.unshare(0x40000000), ctypes.get_errno())
        libc.unshare(0x10000000 | 0x00020000)  # a user + mount namespace, where allowed
        print("mount", libc.mount(b"/tmp", b"/usr", None, 4096 | 16384, None))
        for path in ("/usr/{name}", "/{name}", "/root/{name}"):
            try:
                open(path, "w").write("escaped")
                print("WROTE", path)
            except OSError as exc:
                print("denied", path, exc.errno)
        """
    )
    assert result.ok, result.stderr
    assert "ESCALATED" not in result.stdout
    assert "ptrace -1" in result.stdout and "unshare-net -1" in result.stdout
    assert not (Path("/") / name).exists() and not (Path.home() / name).exists()
    assert not Path("/usr", name).exists()


def test_unsandboxed_mode_is_opt_in_and_loud(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sandbox, "probe", lambda: "bubblewrap is not installed (simulated)")
    monkeypatch.setenv("TRAJFORGE_FAKE", "leaked")
    with pytest.raises(SandboxUnavailableError, match="bubblewrap is not installed"):
        run_python_sync("print(1)")
    with caplog.at_level(logging.WARNING, logger="trajforge.envs.sandbox"):
        result = run_python_sync(
            "import os\nprint(os.environ.get('TRAJFORGE_FAKE', 'clean'))",
            SandboxConfig(allow_unsandboxed=True, timeout_s=5),
        )
    assert result.ok and result.stdout == "clean\n" and not result.sandboxed
    assert "UNSAFE" in caplog.text
    spin = run_python_sync(
        "while True:\n    pass", SandboxConfig(allow_unsandboxed=True, cpu_s=1, timeout_s=10)
    )
    assert spin.killed_reason is KillReason.CPU_LIMIT


def test_sync_wrapper_works_inside_a_running_loop() -> None:
    import asyncio

    async def inside() -> SandboxResult:
        return run_python_sync("print('from a loop')", SandboxConfig(timeout_s=5))

    assert asyncio.run(inside()).stdout == "from a loop\n"


async def test_a_command_sees_its_mounts_as_given_and_nothing_else(tmp_path: Path) -> None:
    shared, secret = tmp_path / "work", tmp_path / "secret"
    shared.mkdir()
    secret.mkdir()
    (secret / "key.txt").write_text("s3cret")
    uid = sandbox.episode_uid()
    if uid is not None:  # the runs drop to this uid: the folder they write must be its
        os.chown(shared, uid, uid)
    mounts = (sandbox.Mount(shared, "/app", True), sandbox.Mount(secret, "/ro"))
    script = f"pwd; echo $GREETING > out.txt; cat /ro/key.txt; echo x > /ro/new; ls {tmp_path}"
    result = await sandbox.run_command(
        ["/bin/bash", "-c", script], mounts=mounts, cwd="/app", env={"GREETING": "hi"}, uid=uid
    )
    assert result.stdout == "/app\ns3cret"
    assert "Read-only file system" in result.stderr and "No such file" in result.stderr
    assert (shared / "out.txt").read_text() == "hi\n" and not (secret / "new").exists()
    again = await sandbox.run_command(["/bin/bash", "-c", "cat out.txt"], mounts=mounts[:1],
                                      cwd="/app", uid=uid)  # fmt: skip
    assert again.stdout == "hi\n"  # the same uid reads and writes what the last run wrote


async def test_mounts_are_never_run_unsandboxed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "probe", lambda: "bubblewrap is not installed (simulated)")
    with pytest.raises(SandboxUnavailableError, match="bubblewrap is not installed"):
        await sandbox.run_command(
            ["/bin/true"],
            SandboxConfig(allow_unsandboxed=True),
            mounts=(sandbox.Mount(Path("/tmp"), "/app"),),
        )
    with pytest.raises(SandboxError, match="NUL byte"):
        await sandbox.run_command(["/bin/echo", "a\x00b"])
