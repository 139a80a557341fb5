"""``trajforge run`` and ``trajforge report`` end by naming the report and the ``trajforge view``
command that browses the run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from trajforge.cli.main import main

EVAL_ONLY = {
    "name": "glance",
    "env": "calculator",
    "model": "expert",  # scripted: no weights to load
    "eval": {"tasks": 2, "max_turns": 1, "max_new_tokens": 4},
    "stages": [{"kind": "eval", "name": "base"}],
}


def _trajforge(monkeypatch: pytest.MonkeyPatch, *args: str) -> None:
    monkeypatch.setattr(sys, "argv", ["trajforge", *args])
    try:
        main()
    except SystemExit as exc:
        assert not exc.code, exc.code


@pytest.mark.slow  # `trajforge run` imports the trainers (torch, peft): 10-30 s on 2 cores
def test_run_and_report_print_the_view_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    experiment = tmp_path / "glance.yaml"
    experiment.write_text(yaml.safe_dump({**EVAL_ONLY, "out_dir": str(tmp_path / "runs")}))
    run_dir = tmp_path / "runs" / "glance"

    _trajforge(monkeypatch, "run", str(experiment))
    out = capsys.readouterr().out
    assert f"report: {run_dir / 'report.html'}" in out
    assert out.rstrip().endswith(f"browse: trajforge view {run_dir}")
    report = (run_dir / "report.html").read_text()
    assert f"<code>trajforge view {run_dir.resolve()}</code>" in report

    _trajforge(monkeypatch, "report", str(run_dir))
    assert f"browse: trajforge view {run_dir}" in capsys.readouterr().out
