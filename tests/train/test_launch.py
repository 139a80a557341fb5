"""``launch_local``: N real processes with the launcher environment, failures and time limits."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from trajforge.errors import ConfigError
from trajforge.train.launch import DistributedError, launch_local


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_every_process_gets_its_rank_and_the_rendezvous(tmp_path: Path) -> None:
    code = (
        "import os, pathlib; e = os.environ; "
        f"pathlib.Path({str(tmp_path)!r}, e['RANK']).write_text("
        "' '.join(e[k] for k in ('LOCAL_RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')))"
    )
    launch_local(python(code), 3, grace_s=5)
    seen = {p.name: p.read_text().split() for p in tmp_path.iterdir()}
    assert sorted(seen) == ["0", "1", "2"]
    assert {tuple(v[1:]) for v in seen.values()} == {("3", "127.0.0.1", seen["0"][3])}
    assert all(v[0] == rank for rank, v in seen.items())


def test_a_failed_process_is_named_and_the_others_are_stopped_after_the_grace() -> None:
    code = "import os, sys, time; sys.exit(3) if os.environ['RANK'] == '1' else time.sleep(60)"
    started = time.monotonic()
    with pytest.raises(
        DistributedError,
        match=r"rank 0 stopped after the others failed; rank 1 exited with status 3 .*--resume",
    ):
        launch_local(python(code), 2, grace_s=1)
    assert time.monotonic() - started < 30


def test_a_run_past_its_time_limit_is_stopped() -> None:
    with pytest.raises(DistributedError, match=r"did not end within 1 s: ranks \[0, 1\] stopped"):
        launch_local(python("import time; time.sleep(60)"), 2, grace_s=1, timeout_s=1)


def test_fewer_than_one_process_is_refused() -> None:
    with pytest.raises(ConfigError, match="--num-processes must be at least 1, got 0"):
        launch_local(python("pass"), 0, grace_s=1)
