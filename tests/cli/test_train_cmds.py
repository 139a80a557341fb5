"""``trajforge train``: Ctrl-C exits 130 saying where it stopped and the command that resumes;
the resume says its step; a used output folder is refused; piped, a run prints its precision and
progress lines, and its folder is reported like an experiment's; ``train distill`` records an RL
run."""

from __future__ import annotations

import json
import os
import re
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


def _report_images(output_dir: Path) -> list[str]:
    """``trajforge report OUTPUT_DIR`` as a user runs it (the one the run wrote removed first):
    the alt texts of the report's figures."""
    (output_dir / "report.html").unlink()
    made = _trajforge("report", str(output_dir))
    assert made.returncode == 0, made.stderr
    html = (output_dir / "report.html").read_text()
    return re.findall(r'<img src="data:image/png;base64,[A-Za-z0-9+/=]{1000,}" alt="([^"]+)"', html)


@pytest.mark.slow
def test_sft_piped_prints_precision_and_progress_and_its_folder_reports(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    write_trajectories(
        data, [synthetic_trajectory(i, turns=2, tokens_per_message=8) for i in range(4)]
    )
    out = tmp_path / "sft1"
    config = tmp_path / "sft.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "output_dir": str(out),
                "data": {"jsonl": str(data), "status": None},
                "batch_size": 2,
                "max_steps": 4,
                "tensorboard": False,
            }
        )
    )
    run = _trajforge("train", "sft", "--config", str(config))  # stdout and stderr are pipes
    assert run.returncode == 0, run.stderr
    assert (
        "sft: 4 trajectories loaded, 2 per step: 4 steps (2 epochs); precision fp32 (asked "
        "auto; this machine: fp32 (native bf16 turned off by TRAJFORGE_NO_NATIVE_BF16))"
    ) in run.stderr
    progress = [line for line in run.stderr.splitlines() if re.match(r"sft \d+/4 steps", line)]
    assert progress[0].startswith("sft 1/4 steps loss=") and "elapsed 0:" in progress[0]
    assert progress[-1].startswith("sft 4/4 steps loss=")
    assert f"report: {out / 'report.html'}" in run.stdout
    results = json.loads((out / "results.json").read_text())
    assert [h["step"] for h in results["stages"][0]["history"]] == [1, 2, 3, 4]
    assert _report_images(out) == ["sft loss per step"]


@pytest.mark.slow
def test_rl_piped_prints_precision_and_progress_and_its_folder_reports(tmp_path: Path) -> None:
    out = tmp_path / "rl1"
    config = tmp_path / "rl.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "output_dir": str(out),
                "env": "calculator",
                "num_tasks": 2,
                "groups_per_step": 2,
                "samples_per_group": 2,
                "steps": 2,
                "max_new_tokens": 8,
                "max_turns": 1,
                "tensorboard": False,
            }
        )
    )
    run = _trajforge("train", "rl", "--config", str(config))
    assert run.returncode == 0, run.stderr
    assert "; precision fp32 (asked auto; this machine: fp32 (native bf16 turned off" in run.stderr
    assert "rollouts sampled in fp32" in run.stderr
    progress = [line for line in run.stderr.splitlines() if re.match(r"rl \d+/2 steps", line)]
    assert [line.split()[1] for line in progress] == ["1/2", "2/2"]
    assert "reward_mean=" in progress[-1]
    assert _report_images(out) == [
        "rl reward per step",
        "rl RL diagnostics per step",
        "rl loss per step",
    ]


@pytest.mark.slow
def test_train_distill_runs_a_teacher_scored_step_and_records_it_as_rl(tmp_path: Path) -> None:
    out = tmp_path / "distill"
    config = tmp_path / "distill.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "output_dir": str(out),
                "env": "calculator",
                "num_tasks": 2,
                "groups_per_step": 1,
                "samples_per_group": 2,
                "steps": 1,
                "max_new_tokens": 8,
                "max_turns": 1,
                "tensorboard": False,
                "distill": {"teacher": "self", "privileged": "answer"},
            }
        )
    )
    run = _trajforge("train", "distill", "--config", str(config), "--json")
    assert run.returncode == 0, run.stderr
    last = json.loads(run.stdout)["last"]
    assert last["distill_reverse_kl"] != 0 and "teacher_logprob_mean" in last
    [stage] = json.loads((out / "results.json").read_text())["stages"]
    assert stage["kind"] == "rl"
