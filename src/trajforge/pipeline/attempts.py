"""A stage's folder and its earlier attempts, and what a run folder takes on disk.

A stage's folder in the run folder (``<run>/sft``) always holds its current attempt. When a
stage is made again, the folder of the attempt before is moved to ``<run>/.attempts/<stage>.<n>``
without its checkpoints (an attempt set aside is never resumed; its ``final/`` weights and
metrics stay to compare), and only the ``keep`` latest attempts set aside are kept.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from trajforge.train import checkpoint_root

ATTEMPTS_DIR = ".attempts"
"""The folder of a run folder that holds its stages' earlier attempts."""


def set_aside(run_dir: Path, stage: str, attempt: int, keep: int) -> Path | None:
    """Move stage ``stage``'s folder, made by attempt ``attempt``, into ``.attempts`` (a
    stage's folder is then free for its next attempt); keep its ``keep`` latest attempts
    there. Returns where the folder went (``None``: there was no folder, or ``keep`` is 0)."""
    folder = run_dir / stage
    moved = None
    if folder.is_dir():
        aside = run_dir / ATTEMPTS_DIR / f"{stage}.{attempt}"
        if aside.exists():  # an attempt number made again after a crash mid-way
            shutil.rmtree(aside)
        aside.parent.mkdir(parents=True, exist_ok=True)
        folder.rename(aside)
        shutil.rmtree(checkpoint_root(aside), ignore_errors=True)
        moved = aside
    for old in earlier_attempts(run_dir, stage)[: -keep or None]:
        shutil.rmtree(old)
        moved = None if old == moved else moved
    return moved


def earlier_attempts(run_dir: Path, stage: str) -> list[Path]:
    """The folders of stage ``stage``'s attempts set aside, oldest first."""
    root = run_dir / ATTEMPTS_DIR
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        name, _, number = path.name.rpartition(".")
        if name == stage and number.isdigit() and path.is_dir():
            found.append((int(number), path))
    return [path for _, path in sorted(found)]


def disk_use(path: Path) -> int:
    """Bytes taken by the files under ``path`` (links not followed, each file counted once)."""
    total, seen = 0, set()
    for root, _dirs, files in os.walk(path):
        for name in files:
            stat = os.lstat(os.path.join(root, name))
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_size
    return total


def size_text(size: int) -> str:
    """``size`` bytes for a person: ``812 KB``, ``1.4 GB``."""
    value, unit = float(size), "B"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            break
        value /= 1000
    return f"{value:.0f} {unit}" if unit in ("B", "KB") or value >= 100 else f"{value:.1f} {unit}"


def run_folder_line(run_dir: Path) -> str:
    """What the run folder takes on disk, and how much of it is earlier attempts."""
    aside = run_dir / ATTEMPTS_DIR
    earlier = f", {size_text(disk_use(aside))} of it earlier attempts in {ATTEMPTS_DIR}/"
    return (
        f"run folder: {run_dir} ({size_text(disk_use(run_dir))}{earlier if aside.is_dir() else ''})"
    )
