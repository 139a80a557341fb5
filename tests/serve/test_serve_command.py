"""``trajforge serve`` as a user starts it: a real process on a free local port, stopped with
Ctrl-C, leaving its trajectories in the store and no process behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from openai import OpenAI
from serve_helpers import assert_token_exact, recorded

TRAJFORGE = str(Path(sys.executable).parent / "trajforge")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until_serving(process: subprocess.Popen[str], port: int) -> None:
    deadline = time.monotonic() + 180  # a loaded machine starts torch slowly
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return
        except httpx.ConnectError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "serve did not start"
        time.sleep(0.1)


def test_serve_records_until_interrupted(tmp_path: Path) -> None:
    store, port = tmp_path / "served.db", _free_port()
    argv = [TRAJFORGE, "serve", "--model", "tiny", "--port", str(port), "--run", "gw"]
    process = subprocess.Popen(
        [*argv, "--store", str(store)], stderr=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    try:
        _wait_until_serving(process, port)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/sessions/one/v1", api_key="unused")
        reply = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Hello?"}], max_tokens=6, seed=1
        )
        assert reply.usage is not None and 1 <= reply.usage.completion_tokens <= 6
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "serving tiny (fp32) at http://127.0.0.1" in err
    assert "stored 1 trajectories of run gw" in err
    (traj,) = recorded(store)
    assert traj.metadata["gateway"]["session"] == "one"
    assert_token_exact(store)


def test_served_model_name_is_the_one_name_clients_may_ask_for(tmp_path: Path) -> None:
    store, port = tmp_path / "served.db", _free_port()
    argv = [
        TRAJFORGE,
        "serve",
        "--model",
        "tiny",
        "--served-model-name",
        "calc-agent",
        "--run",
        "gw",
    ]
    process = subprocess.Popen(
        [*argv, "--port", str(port), "--store", str(store)],
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    try:
        _wait_until_serving(process, port)
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models").json()["data"]
        assert [m["id"] for m in models] == ["calc-agent"]
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/sessions/one/v1", api_key="unused")
        reply = client.chat.completions.create(
            model="calc-agent",
            messages=[{"role": "user", "content": "Hello?"}],
            max_tokens=4,
            seed=1,
        )
        assert reply.usage is not None and reply.usage.completion_tokens >= 1
        refused = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={
                "model": "tiny",
                "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 4,
            },
        )
        assert refused.status_code == 404
        assert "model 'tiny' is not served here; this gateway serves calc-agent" in refused.text
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "serving tiny as calc-agent (fp32)" in err
    (traj,) = recorded(store)
    assert traj.model == "tiny"  # the model behind the name, as trajforge loads it
