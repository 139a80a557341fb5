"""The type of the ``run_cli`` fixture (tests/cli/conftest.py): ``trajforge`` run in-process."""

from __future__ import annotations

from collections.abc import Callable

CliResult = tuple[int, str, str]
"""Exit status, stdout, stderr."""
RunCli = Callable[..., CliResult]
"""``run_cli(*args: str | Path)``."""
