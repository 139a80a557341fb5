"""The step loop shared by the trainers: resume, checkpoints every N steps, metrics, callbacks;
and the helpers that split a step over several processes (``trajforge.train.distributed``)."""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import torch
from rich.console import Console
from torch.distributed.fsdp import FSDPModule

from trajforge.errors import DataError
from trajforge.precision import describe_machine
from trajforge.ram import start_memory_watchdog
from trajforge.train.batch import TokenBatch, TokenSequence, micro_batches
from trajforge.train.checkpoint import (
    claim_output_dir,
    load_checkpoint,
    require_checkpoint,
    save_checkpoint,
)
from trajforge.train.config import CommonSettings
from trajforge.train.distributed import (
    DistributedError,
    from_main,
    pad_to_common_count,
    reduce_metrics,
    split_for_rank,
)
from trajforge.train.interrupted import TrainingInterrupted
from trajforge.train.metrics import MetricsLogger
from trajforge.train.model import build_train_parts
from trajforge.train.parts import TrainParts, clip_and_step, save_final

StepCallback = Callable[[int, dict[str, float]], None]
T = TypeVar("T")


@dataclass
class TrainResult:
    """What a finished run produced."""

    steps: int
    history: list[dict[str, Any]] = field(default_factory=list)
    final_dir: Path | None = None
    resumed_from: int = 0
    precision: str = "fp32"
    """``bf16`` when the steps ran under bf16 autocast, else ``fp32``."""
    validation: list[dict[str, Any]] = field(default_factory=list)
    """Validation points (RL with ``validation.tasks``): step, reward_mean, success, ..."""
    plan: str = ""
    """What the run loaded and the steps it made, as printed at its start."""
    kept_step: int | None = None
    """The step whose weights were saved as final, when validation chose them."""


class Trainer(ABC):
    """Subclasses implement ``total_steps``, ``run_step`` and the data cursor."""

    description = "train"
    metric_weight: str | None = None
    """The step metric that weights each process's metrics when they are averaged over the
    processes (the count its means are taken over); ``None``: a plain mean."""

    def __init__(
        self,
        cfg: CommonSettings,
        *,
        parts: TrainParts | None = None,
        callbacks: Sequence[StepCallback] = (),
    ) -> None:
        self.cfg = cfg
        self.parts = parts if parts is not None else build_train_parts(cfg, self.schedule_steps())
        self.callbacks = list(callbacks)
        self._console = Console(stderr=True, highlight=False)
        self._saved_at = 0.0
        """When the last checkpoint was saved (``time.monotonic``), for ``checkpoint_every_s``."""

    @abstractmethod
    def total_steps(self) -> int:
        """Number of optimizer steps the run makes."""

    def schedule_steps(self) -> int:
        """Number of optimizer steps the learning-rate schedule spans."""
        return self.total_steps()

    @abstractmethod
    def run_step(self, step: int) -> dict[str, float]:
        """Make optimizer step ``step`` (1-based) and return its metrics."""

    @abstractmethod
    def cursor(self) -> dict[str, Any]:
        """Where the data stream stands after the last step (saved in checkpoints)."""

    @abstractmethod
    def set_cursor(self, cursor: dict[str, Any]) -> None:
        """Continue the data stream from a saved cursor."""

    def train(self, *, resume: bool = False, overwrite: bool = False) -> TrainResult:
        """Run to ``total_steps``. With ``resume``, continue from the latest checkpoint in
        ``output_dir`` (an error when there is none); without it, an ``output_dir`` holding
        another run is refused unless ``overwrite``, which clears it first. Ctrl-C raises
        ``TrainingInterrupted``: the step reached and the last checkpoint."""
        start_memory_watchdog()
        out = self.cfg.output_dir
        start, saved = 0, None
        if resume:
            saved = require_checkpoint(out)
            start, cursor = load_checkpoint(self.parts, saved)
            self.set_cursor(cursor)
        else:
            from_main(lambda: claim_output_dir(out, overwrite=overwrite))
        total = self.total_steps()
        self.say(f"{self.description}: {self.plan()}; precision {self.precision_text()}")
        if resume:
            self.say(
                f"{self.description}: resuming from step {start} ({saved}); "
                f"{max(total - start, 0)} steps to go"
            )
        logger = MetricsLogger(
            out,
            total_steps=total,
            start_step=start,
            tensorboard=self.cfg.tensorboard,
            progress=self.cfg.progress,
            enabled=self.parts.accelerator.is_main_process,
            description=self.description,
        )
        self._saved_at = time.monotonic()
        done = start
        try:
            with logger:
                self.before_steps(start)
                for step in range(start + 1, total + 1):
                    metrics = self._step(step)
                    done = step
                    if step % self.cfg.log_every == 0 or step == total:
                        logger.log(step, metrics)
                    if self._checkpoint_due(step, total):
                        saved = save_checkpoint(
                            self.parts, out, step, self.cursor(), keep=self.cfg.keep_checkpoints
                        )
                        self._saved_at = time.monotonic()
                    for cb in self.callbacks:
                        cb(step, metrics)
                self.after_steps()
        except KeyboardInterrupt:
            raise TrainingInterrupted(self.description, done, total, saved, out) from None
        final = save_final(self.parts, out / "final")
        return TrainResult(total, logger.history, final, start, self.precision(), plan=self.plan())

    def _checkpoint_due(self, step: int, total: int) -> bool:
        """A checkpoint after ``step``: every ``checkpoint_every`` steps, once
        ``checkpoint_every_s`` seconds passed since the last (the main process's clock decides
        for all), and at the end when either is set."""
        every, every_s = self.cfg.checkpoint_every, self.cfg.checkpoint_every_s
        if not (every or every_s):
            return False
        if step == total or (every and step % every == 0):
            return True
        return bool(every_s) and from_main(lambda: time.monotonic() - self._saved_at >= every_s)

    def precision(self) -> str:
        """``bf16`` when the steps run under bf16 autocast, else ``fp32``."""
        return "bf16" if self.parts.accelerator.mixed_precision == "bf16" else "fp32"

    def precision_text(self) -> str:
        """The precision the steps run at and why: what the config asked for and what this
        machine makes of ``auto``."""
        asked = self.cfg.model.precision
        return f"{self.precision()} (asked {asked}; this machine: {describe_machine()})"

    @abstractmethod
    def plan(self) -> str:
        """What the run loaded and the steps it will make, in words (printed at its start)."""

    def say(self, line: str) -> None:
        """One line on stderr from the main process (the plan, a resume)."""
        if self.parts.accelerator.is_main_process:
            self._console.print(line, soft_wrap=True)

    def _step(self, step: int) -> dict[str, float]:
        """``run_step`` and its metrics over the processes. Over several, an error (often a
        collective whose peer died) becomes one line naming this process and the step."""
        acc = self.parts.accelerator
        if acc.num_processes == 1:
            return self.run_step(step)
        try:
            return reduce_metrics(self.run_step(step), self.metric_weight)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise DistributedError(
                f"rank {acc.process_index} of {acc.num_processes} failed at step {step}: "
                f"{type(exc).__name__}: {first}"
            ) from exc

    def before_steps(self, start: int) -> None:
        """Called once before the first step of this call (``start`` steps already made)."""
        return None  # a hook: trainers without validation need nothing here

    def after_steps(self) -> None:
        """Called after the last step, before the final weights are saved."""
        return None  # a hook, like ``before_steps``

    # Helpers for subclasses.

    def shard(self, items: Sequence[T], sizes: Sequence[int]) -> list[T]:
        """This process's share of a step's ``items`` of ``sizes`` tokens (all of them on a single
        process), by ``split_for_rank``."""
        acc = self.parts.accelerator
        if acc.num_processes == 1:
            return list(items)
        return [items[i] for i in split_for_rank(sizes, acc.process_index, acc.num_processes)]

    def even_passes(
        self, batches: list[TokenBatch], spare: Callable[[], TokenBatch]
    ) -> list[tuple[TokenBatch, bool]]:
        """``batches`` as ``(batch, counted)``, padded so every process makes as many passes:
        with its first batch, or ``spare()`` when it has none, not counted (loss weight 0)."""
        if self.parts.accelerator.num_processes == 1:
            return [(b, True) for b in batches]
        filler = batches[0] if batches else spare()
        return pad_to_common_count(batches, filler, self.parts.device)

    def global_mean_divisor(self, local_count: float) -> float:
        """Divisor that turns a local loss sum into this process's share of the global mean.

        DDP averages gradients over processes, so each process divides by global / processes.
        """
        acc = self.parts.accelerator
        if acc.num_processes == 1:
            return max(local_count, 1.0)
        total = acc.reduce(torch.tensor(float(local_count), device=acc.device), reduction="sum")
        return max(float(total.item()), 1.0) / acc.num_processes

    def refuse_unseen_images(self, seqs: Iterable[TokenSequence]) -> None:
        """Raise ``DataError`` naming the first of ``seqs`` with images when the model is a text
        model (it would train on their placeholders without seeing them)."""
        if self.parts.pixels is not None:
            return
        with_images = next((s for s in seqs if s.images), None)
        if with_images is not None:
            raise DataError(
                f"trajectory {with_images.trajectory_id} has images, which model "
                f"{self.cfg.model.spec!r} (a text model) cannot see: train it with a "
                "vision-language model"
            )

    def micro_batches(self, seqs: Sequence[TokenSequence]) -> list[TokenBatch]:
        """``seqs`` in padded micro-batches, with a vision-language model's pixel tensors."""
        self.refuse_unseen_images(seqs)
        return micro_batches(
            seqs,
            max_tokens=self.cfg.micro_batch_tokens,
            max_rows=self.cfg.micro_batch_rows,
            pad_token_id=self.parts.pad_token_id,
            pixels=self.parts.pixels,
        )

    def backward(self, loss: torch.Tensor, *, last: bool) -> None:
        """Backward one micro-batch; gradients sync across processes only on the last one."""
        acc = self.parts.accelerator
        if not loss.requires_grad:
            # A micro-batch without loss tokens contributes nothing (and has no graph).
            return
        if last:
            acc.backward(loss)
        else:
            with self._no_sync():
                acc.backward(loss)

    @contextlib.contextmanager
    def _no_sync(self) -> Iterator[None]:
        """Gradients accumulate locally (DDP: no all-reduce; FSDP: no reduce-scatter)."""
        model = self.parts.logprob_model
        if not self.parts.sharded:
            with self.parts.accelerator.no_sync(model):
                yield
            return
        sharded = cast(FSDPModule, model)
        sharded.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            sharded.set_requires_gradient_sync(True)

    def optimizer_step(self) -> dict[str, float]:
        lr = float(self.parts.scheduler.get_last_lr()[0])
        norm = clip_and_step(self.parts, self.cfg.optim.max_grad_norm)
        return {"grad_norm": norm, "lr": lr}
