"""harbor 0.26.0 in its own Python >= 3.12 environment (``make setup``'s ``.venv-harbor``):
scripts run there check trajforge's files against harbor's own models."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

HARBOR_PYTHON = Path(__file__).resolve().parents[1] / ".venv-harbor" / "bin" / "python"

needs_harbor = pytest.mark.skipif(
    not HARBOR_PYTHON.is_file(),
    reason="no .venv-harbor: harbor needs Python >= 3.12, and make setup found none",
)


def run_harbor(script: str, *args: str) -> str:
    """What ``script`` (Python source) prints, run with harbor's interpreter."""
    done = subprocess.run(
        [str(HARBOR_PYTHON), "-c", script, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
