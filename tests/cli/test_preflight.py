"""Server commands check their port, and commands their model's server, before loading anything:
a mistake is one line, nothing is created, and ``--port 0`` picks a free port."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_runner import RunCli
from trajforge.cli.preflight import check_reachable, claim_port
from trajforge.errors import ConfigError


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another server listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_claim_port_refuses_a_busy_port_naming_it_and_port_0(busy_port: int) -> None:
    with pytest.raises(ConfigError, match=rf"--port {busy_port}: port {busy_port} .* --port 0"):
        claim_port("127.0.0.1", busy_port)


def test_claim_port_0_picks_a_free_port() -> None:
    port = claim_port("127.0.0.1", 0)
    assert port > 0
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free indeed


def test_claim_port_refuses_an_address_not_of_this_machine() -> None:
    with pytest.raises(ConfigError, match=r"--host 192\.0\.2\.1: cannot listen there"):
        claim_port("192.0.2.1", 0)


@pytest.mark.parametrize(
    "command",
    [
        ["serve", "--model", "tiny", "--port", "{port}"],
        ["view", "--port", "{port}"],
        ["mcp", "serve", "calculator", "--http", "{port}"],
        ["openenv", "serve", "calculator", "--port", "{port}"],
        ["otel-receive", "--port", "{port}"],
    ],
    ids=lambda c: c[0],
)
def test_a_server_on_a_busy_port_says_so_in_one_line_and_creates_nothing(
    run_cli: RunCli, tmp_path: Path, busy_port: int, command: list[str]
) -> None:
    store = tmp_path / "store.db"
    args = [part.format(port=busy_port) for part in command]
    if args[0] not in ("mcp", "openenv"):
        args += ["--store", str(store)]
    code, out, err = run_cli(*args)
    option = "--http" if args[0] == "mcp" else "--port"
    assert code == 1 and out == ""
    assert err.strip().splitlines() == [
        f"error: {option} {busy_port}: port {busy_port} on 127.0.0.1 is already in use "
        f"(another server is listening there); choose another, or {option} 0 for any free port"
    ]
    assert list(tmp_path.iterdir()) == []


def test_view_on_port_0_prints_the_port_it_picked(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    subprocess.run(
        [sys.executable, "-m", "trajforge", "rollout", "--env", "calculator", "--model", "expert",
         "--tasks", "1", "--store", str(store)], check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "trajforge", "view", "--port", "0", "--store", str(store)],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert line.startswith(f"viewing {store} at http://127.0.0.1:")
    port = int(line.split("127.0.0.1:", 1)[1].split("/", 1)[0])
    assert port > 0


def test_check_reachable_refuses_a_closed_port_and_passes_others(closed_port: int) -> None:
    with pytest.raises(ConfigError, match=r"--model: no server answers at http://127.0.0.1:"):
        check_reachable(f"openai:http://127.0.0.1:{closed_port}/v1#m", "--model")
    check_reachable("embedded", "--model")
    check_reachable(None, "--user")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        check_reachable(f"openai:http://127.0.0.1:{sock.getsockname()[1]}/v1#m", "--model")


@pytest.mark.parametrize("command", ["rollout", "eval", "serve", "collect"])
def test_a_model_server_that_does_not_answer_is_one_line_before_anything_is_made(
    run_cli: RunCli, tmp_path: Path, closed_port: int, command: str
) -> None:
    model = f"openai:http://127.0.0.1:{closed_port}#gpt"
    extra = ["--agent", "python agent.py", "--env", "calculator"] if command == "collect" else []
    code, out, err = run_cli(command, "--model", model, *extra, "--store", tmp_path / "s.db")
    assert code == 1 and out == ""
    assert err.strip().splitlines() == [
        f"error: --model: no server answers at http://127.0.0.1:{closed_port} (Connection "
        "refused); start it, or check the URL"
    ]
    assert list(tmp_path.iterdir()) == []
