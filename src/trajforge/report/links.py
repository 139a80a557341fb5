"""The ``trajforge view`` command line for a run folder, as reports and ``trajforge run`` print it."""

from __future__ import annotations

import shlex
from pathlib import Path


def view_command(run_dir: Path) -> str:
    """``trajforge view <run_dir>``, quoted for a POSIX shell."""
    return f"trajforge view {shlex.quote(str(run_dir))}"
