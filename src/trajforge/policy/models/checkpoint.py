"""What makes a folder a training checkpoint (``runs/x/checkpoints/step-N``), which loads as a
model like ``final/``: the policy names and loaders ask it, torch-free, and so does training."""

from __future__ import annotations

from pathlib import Path

CHECKPOINT_FILES = ("state.json", "trainable.pt")
"""The files every training checkpoint holds."""


def is_checkpoint(folder: Path) -> bool:
    """Whether ``folder`` is a training checkpoint."""
    return all((folder / name).is_file() for name in CHECKPOINT_FILES)


LATEST = "latest"
"""The small text file in a run's ``checkpoints/`` folder naming its newest checkpoint."""


def resolve_checkpoint(path: Path) -> Path:
    """The checkpoint a ``checkpoints/`` folder's ``latest`` pointer names, given the pointer
    or the folder; any other path as it is (a pointer naming no checkpoint folder too, so that
    the error names what was asked for)."""
    pointer = path / LATEST if path.is_dir() else path
    if pointer.name != LATEST or not pointer.is_file():
        return path
    target = pointer.parent / pointer.read_text().strip()
    return target if target.is_dir() else path
