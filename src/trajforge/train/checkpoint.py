"""Atomic checkpoints that resume exactly: weights (or adapter), optimizer, schedule, RNG, cursor.

A checkpoint is written to a temporary folder and renamed into place, then ``latest`` (a small
text file naming it) is replaced atomically, so a kill at any moment leaves either the previous
or the new checkpoint, never a half-written one.

A checkpoint holds whole tensors keyed by parameter name (weights and optimizer state gathered
from the shards under FSDP), written by the main process alone: it resumes at any world size
and under either strategy.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trajforge.errors import TrajforgeError
from trajforge.train.distributed import barrier
from trajforge.train.interrupted import checkpoint_step
from trajforge.train.parts import TrainParts, save_processing


class CheckpointError(TrajforgeError):
    """A checkpoint is missing or unreadable."""


class OutputDirError(TrajforgeError):
    """An output folder holds another run that a fresh run would mix with."""


RUN_ENTRIES = (
    "metrics.jsonl",
    "tensorboard",
    "checkpoints",
    "final",
    "results.json",
    "report.html",
)
"""What a training run writes in its output folder (``trajforge train`` its results and report
too)."""


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoint_root(output_dir: Path) -> Path:
    return output_dir / "checkpoints"


def save_checkpoint(
    parts: TrainParts,
    output_dir: Path,
    step: int,
    cursor: dict[str, Any],
    *,
    keep: int | None = None,
) -> Path:
    """Write checkpoint ``step-<step>`` atomically, point ``latest`` at it, then delete all
    but the ``keep`` latest (``None``: keep all)."""
    root = checkpoint_root(output_dir)
    final = root / f"step-{step:07d}"
    # Gathering is a collective: every process takes part, the main one writes.
    trainable, optimizer = parts.trainable_state(), parts.optimizer_state()
    if parts.accelerator.is_main_process:
        _write(parts, root, final, step, cursor, trainable, optimizer)
        if keep is not None:
            prune_checkpoints(root, keep)
    barrier()
    return final


def prune_checkpoints(root: Path, keep: int) -> list[Path]:
    """Delete all but the ``keep`` highest-step checkpoints under ``root`` (the one ``latest``
    names is always kept); return what was deleted. Runs after ``latest`` moved, so a crash
    mid-way leaves a resumable folder."""
    steps = sorted(
        (p for p in root.glob("step-*") if p.is_dir() and p.name[5:].isdigit()),
        key=checkpoint_step,
    )
    latest = latest_checkpoint(root.parent)
    doomed = [p for p in steps[: max(0, len(steps) - keep)] if p != latest]
    for path in doomed:
        shutil.rmtree(path)
    return doomed


def _write(
    parts: TrainParts,
    root: Path,
    final: Path,
    step: int,
    cursor: dict[str, Any],
    trainable: dict[str, torch.Tensor],
    optimizer: dict[str, Any],
) -> None:
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-step-{step:07d}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    torch.save(trainable, tmp / "trainable.pt")
    torch.save(optimizer, tmp / "optimizer.pt")
    torch.save(parts.scheduler.state_dict(), tmp / "scheduler.pt")
    torch.save(rng_state(), tmp / "rng.pt")
    state = {"step": step, "cursor": cursor, "lora": parts.is_lora, "base": parts.base}
    (tmp / "state.json").write_text(json.dumps(state, indent=2))
    # With its adapter's settings and the tokenizer a checkpoint loads as a model by itself
    # (``trajforge.policy.models.loaders.checkpoint_model``).
    peft_config = getattr(parts.unwrapped_model(), "peft_config", None)
    if parts.is_lora and peft_config is not None:
        peft_config["default"].save_pretrained(str(tmp))
    save_processing(parts, tmp)
    _fsync_dir_files(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    latest_tmp = root / f".latest-{os.getpid()}"
    latest_tmp.write_text(final.name)
    os.replace(latest_tmp, root / "latest")


def require_checkpoint(output_dir: Path) -> Path:
    """The latest checkpoint in ``output_dir``; an error naming the folder when it has none."""
    found = latest_checkpoint(output_dir)
    if found is not None:
        return found
    if not output_dir.is_dir():
        raise CheckpointError(f"resume: {output_dir} does not exist; there is nothing to resume")
    raise CheckpointError(
        f"resume: {output_dir} holds no checkpoint (set checkpoint_every or checkpoint_every_s "
        "to save them); run without --resume to start afresh"
    )


def claim_output_dir(output_dir: Path, *, overwrite: bool) -> None:
    """Make ``output_dir`` ready for a fresh run: refused when it holds another run's
    checkpoints, metrics or weights, unless ``overwrite``, which deletes them (a new run mixed
    with an old one's files would show both runs' curves and resume from the old one)."""
    found = [output_dir / name for name in RUN_ENTRIES if (output_dir / name).exists()]
    if not found:
        return
    if not overwrite:
        latest = latest_checkpoint(output_dir)
        what = ", ".join(p.name + ("/" if p.is_dir() else "") for p in found)
        resume = (
            f"continue it from step {checkpoint_step(latest)} with --resume, "
            if latest is not None
            else ""
        )
        raise OutputDirError(
            f"output_dir {output_dir} holds another run ({what}): {resume}replace it with "
            "--overwrite, or choose another output_dir"
        )
    for path in found:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def latest_checkpoint(output_dir: Path) -> Path | None:
    marker = checkpoint_root(output_dir) / "latest"
    if not marker.exists():
        return None
    path = marker.parent / marker.read_text().strip()
    return path if path.is_dir() else None


def load_checkpoint(parts: TrainParts, path: Path) -> tuple[int, dict[str, Any]]:
    """Restore everything from ``path``; return ``(step, cursor)``."""
    try:
        state = json.loads((path / "state.json").read_text())
        parts.load_trainable_state(torch.load(path / "trainable.pt", weights_only=True))
        parts.load_optimizer_state(torch.load(path / "optimizer.pt", weights_only=True))
        parts.scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=True))
        set_rng_state(torch.load(path / "rng.pt", weights_only=False))
    except FileNotFoundError as exc:
        raise CheckpointError(
            f"checkpoint {path} is incomplete: {exc.filename} is missing"
        ) from None
    if bool(state.get("lora")) != parts.is_lora:
        raise CheckpointError(f"checkpoint {path}: LoRA setting differs from the config")
    return int(state["step"]), dict(state["cursor"])


def _fsync_dir_files(folder: Path) -> None:
    for f in folder.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
