"""What makes a folder a training checkpoint (``runs/x/checkpoints/step-N``), which loads as a
model like ``final/``: the policy names and loaders ask it, torch-free, and so does training."""

from __future__ import annotations

from pathlib import Path

CHECKPOINT_FILES = ("state.json", "trainable.pt")
"""The files every training checkpoint holds."""


def is_checkpoint(folder: Path) -> bool:
    """Whether ``folder`` is a training checkpoint."""
    return all((folder / name).is_file() for name in CHECKPOINT_FILES)
