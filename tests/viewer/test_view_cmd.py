"""``trajforge view`` as a user starts it: a real process on a free local port serving a run
folder, stopped by Ctrl-C promptly even while a browser's live stream is open."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from trajforge.cli.main import main
from trajforge.cli.view_cmds import _locate
from trajforge.store import TrajectoryStore

from .layout import RUN

TRAJFORGE = str(Path(sys.executable).parent / "trajforge")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_view_serves_a_run_folder_until_interrupted(run_dir: Path) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [TRAJFORGE, "view", str(run_dir), "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                runs = httpx.get(f"{base}/api/runs").json()["runs"]
                break
            except httpx.ConnectError:
                assert process.poll() is None and time.monotonic() < deadline, "view did not start"
                time.sleep(0.1)
        assert RUN in {r["run_id"] for r in runs}
        assert "training curves" in httpx.get(f"{base}/").text  # the folder's metrics.jsonl
        with httpx.stream("GET", f"{base}/api/runs/{RUN}/events", timeout=10) as stream:
            assert next(stream.iter_text()).startswith("retry:")
            stopped = time.monotonic()
            process.send_signal(signal.SIGINT)  # while the stream is open
            _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert time.monotonic() - stopped < 15, "Ctrl-C waited for the open stream to end"
    assert f"viewing {run_dir / 'store.db'} at {base}/" in err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["view", "{tmp}"], "no store.db here (is it a trajforge run folder?)"),
        (["view", "{tmp}/missing"], "no such run folder or store file"),
        (["view", "{tmp}", "--store", "{tmp}/x.db"], "give a run folder or --store, not both"),
    ],
)
def test_view_names_a_bad_target_in_one_line(
    tmp_path: Path,
    args: list[str],
    words: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(sys, "argv", ["trajforge", *(a.format(tmp=tmp_path) for a in args)])
    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err
    assert len(err.strip().splitlines()) == 1


def test_a_training_runs_folder_opens_the_store_its_results_name(tmp_path: Path) -> None:
    store = tmp_path / "elsewhere" / "rollouts.db"
    TrajectoryStore(store).close()
    out = tmp_path / "rl1"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"kind": "train", "store": str(store)}))
    assert _locate(out, None) == (store, out)


def test_a_training_run_without_a_store_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "results.json").write_text(json.dumps({"kind": "train", "store": None}))
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setattr(sys, "argv", ["trajforge", "view", str(tmp_path)])
    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert "this training run kept no trajectories (set store: in its config" in err
    assert len(err.strip().splitlines()) == 1
