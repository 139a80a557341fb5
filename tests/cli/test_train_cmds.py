"""``trajforge train``: Ctrl-C exits 130 saying where it stopped and the command that resumes;
the resume says its step; a used output folder is refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from trajforge.formats.jsonl import write_trajectories
from trajforge.schema.synthetic import synthetic_trajectory


def _trajforge(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trajforge", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.slow
def test_ctrl_c_exits_130_naming_the_step_checkpoint_and_resume_command(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    write_trajectories(
        data, [synthetic_trajectory(i, turns=2, tokens_per_message=8) for i in range(4)]
    )
    config = tmp_path / "sft.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "output_dir": str(tmp_path / "out"),
                "data": {"jsonl": str(data), "status": None},
                "batch_size": 2,
                "max_steps": 100_000,
                "checkpoint_every": 2,
                "tensorboard": False,
                "progress": False,
            }
        )
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "trajforge", "train", "sft", "--config", str(config)],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        # Started in the background by a non-interactive shell, the suite may have SIGINT
        # ignored, and the child would inherit that and never stop.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        metrics = tmp_path / "out" / "metrics.jsonl"
        deadline = time.monotonic() + 300
        while not (metrics.exists() and metrics.read_text().count("\n") >= 3):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        # A run that did not stop must not go on writing checkpoints after the test.
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    assert "sft: 4 trajectories loaded, 2 per step: 100000 steps" in err
    assert "interrupted: sft stopped at step " in err and "the last checkpoint is step " in err
    assert f"resume with: trajforge train sft --config {config} --resume" in err
    saved = int(err.split("the last checkpoint is step ")[1].split()[0])

    refused = _trajforge("train", "sft", "--config", str(config))
    assert refused.returncode == 1
    assert f"continue it from step {saved} with --resume" in refused.stderr

    resumed = _trajforge(
        "train", "sft", "--config", str(config), "--resume", f"max_steps={saved + 1}"
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"sft: resuming from step {saved} (" in resumed.stderr
    assert "1 steps to go" in resumed.stderr
