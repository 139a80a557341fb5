"""The ``trajforge`` entry point run in-process, as a user's shell runs it: exit status, stdout and
stderr."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cli_runner import CliResult, RunCli
from trajforge.cli.main import main


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> RunCli:
    """``run_cli(*args)`` -> (exit status, stdout, stderr) of ``trajforge *args``."""
    monkeypatch.setenv("COLUMNS", "200")

    def run(*args: str | Path) -> CliResult:
        monkeypatch.setattr(sys, "argv", ["trajforge", *map(str, args)])
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return run
