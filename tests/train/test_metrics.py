"""The metrics logger's progress where stderr is not a terminal: plain lines, not a bar that
shows nothing until the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajforge.train.metrics import MetricsLogger


def test_progress_is_plain_lines_on_a_pipe_and_metrics_go_to_jsonl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with MetricsLogger(
        tmp_path, total_steps=3, tensorboard=False, progress=True, description="sft"
    ) as logger:
        for step in range(1, 4):
            logger.log(step, {"loss": 1.0 / step, "grad_norm": 0.5})
    err = capsys.readouterr().err.splitlines()
    # The first and the last step (three quick steps fall in one 10 s interval).
    assert [line.split(" loss=")[0] for line in err] == ["sft 1/3 steps", "sft 3/3 steps"]
    assert err[-1].startswith("sft 3/3 steps loss=0.3333, elapsed 0:00:0")
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [h["step"] for h in logged] == [1, 2, 3]


def test_no_progress_prints_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with MetricsLogger(tmp_path, total_steps=2, tensorboard=False, progress=False) as logger:
        logger.log(1, {"loss": 1.0})
        logger.log(2, {"loss": 0.5})
    assert capsys.readouterr().err == ""
