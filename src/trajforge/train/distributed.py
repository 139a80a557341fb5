"""Training over several processes: the split of a step's batch, equal pass counts on every rank,
FSDP2 sharding, and work done once on the main process and shared with the others.

A launcher (``trajforge train ... --num-processes N``, ``accelerate launch``, ``torchrun``) sets
the rank in the environment and accelerate joins the process group. In one process every helper
here is the identity, so the single-process path is unchanged.

The rules that make N processes compute what one computes with the same global batch:

- every rank reads the whole step's batch (the data cursor is global) and trains on the share
  ``split_for_rank`` deals it: items sorted by size and dealt round-robin, so loads are even;
- a loss sum is divided by ``global count / N`` (``Trainer.global_mean_divisor``), and DDP and
  FSDP average gradients over N, so the update is the global mean;
- every rank makes the same number of forward/backward passes (``pad_to_common_count``): FSDP
  gathers weights in each pass and DDP syncs once per step; a rank with fewer micro-batches
  repeats one with its loss weighted 0.

Why trajforge applies ``fully_shard`` itself: accelerate 1.15 enables its FSDP plugin only on
accelerator devices (``AcceleratorState`` keeps ``MULTI_CPU`` for CPU processes and drops the
plugin), so FSDP through accelerate cannot run on CPUs; the same FSDP2 code then runs on CPUs
(gloo) and GPUs (nccl).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from accelerate import PartialState
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from trajforge.train.batch import TokenBatch
from trajforge.train.launch import DistributedError

T = TypeVar("T")

SUMMED_METRICS = frozenset({"tokens", "loss_tokens", "pairs", "tokens_per_s", "micro_batches"})
"""Step metrics that add up over processes; the others are averaged."""


def world_size() -> int:
    """Processes in this run (1 without a launcher)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_main_process() -> bool:
    """Whether this is the main process (rank 0, or the only one)."""
    return world_size() == 1 or dist.get_rank() == 0


def on_cpu() -> bool:
    """Whether the processes run on CPUs: accelerate then joins them over gloo only when told."""
    return not torch.accelerator.is_available()


def join_launched_processes(timeout_s: float) -> None:
    """Join the process group now when a launcher started several processes (a no-op
    otherwise): for work shared before any trainer exists (``trajforge run``'s stages)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        PartialState(cpu=on_cpu(), timeout=timedelta(seconds=timeout_s))


def split_for_rank(sizes: Sequence[int], rank: int, world: int) -> list[int]:
    """Indices (ascending) of the items rank ``rank`` of ``world`` trains on.

    Items are sorted by size (largest first, ties by index) and dealt round-robin, so each rank
    gets a similar number of tokens and the ranks' shares are disjoint and cover every item.
    """
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    return sorted(order[rank::world])


def max_over_ranks(value: int, device: torch.device) -> int:
    """The largest ``value`` over the processes."""
    if world_size() == 1:
        return value
    t = torch.tensor([value], dtype=torch.long, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def pad_to_common_count(
    batches: list[TokenBatch], filler: TokenBatch, device: torch.device
) -> list[tuple[TokenBatch, bool]]:
    """``batches`` as ``(batch, counted)``, padded with ``(filler, False)`` up to the largest count
    over the processes; a pass that is not counted has its loss weighted 0."""
    count = max_over_ranks(len(batches), device)
    return [(b, True) for b in batches] + [(filler, False)] * (count - len(batches))


def shard_model(module: nn.Module, inner: nn.Module, device: torch.device) -> None:
    """Shard ``module`` in place with FSDP2: one unit per decoder layer of the Hugging Face model
    ``inner`` (its ``_no_split_modules``), and the rest (embeddings, head) in the root unit."""
    mesh = init_device_mesh(device.type, (world_size(),))
    get_base = getattr(inner, "get_base_model", None)
    base = get_base() if callable(get_base) else inner
    layer_names = set(getattr(base, "_no_split_modules", None) or ())
    for sub in module.modules():
        if type(sub).__name__ in layer_names:
            fully_shard(sub, mesh=mesh)
    fully_shard(module, mesh=mesh)


def from_main(compute: Callable[[], T]) -> T:
    """``compute()`` run on the main process and its result sent to the others (rollouts,
    rewards, validation). An exception on the main process is raised there and reported on
    the others as a ``DistributedError`` (no process waits for a result that never comes)."""
    if world_size() == 1:
        return compute()
    box: list[Any] = [None]
    error: BaseException | None = None
    if dist.get_rank() == 0:
        try:
            box[0] = ("ok", compute())
        except BaseException as exc:
            error = exc
            box[0] = ("error", f"{type(exc).__name__}: {exc}")
    dist.broadcast_object_list(box, src=0)
    if error is not None:
        raise error
    kind, value = box[0]
    if kind == "error":
        raise DistributedError(f"the main process failed: {value}")
    return value


def reduce_metrics(metrics: dict[str, float], weight: str | None = None) -> dict[str, float]:
    """Step metrics over the processes: counts and throughput summed (``SUMMED_METRICS``), the
    rest averaged over the processes that report them, each weighted by its own ``weight``
    metric when given (a loss that is a mean over a rank's tokens becomes the global mean)."""
    world = world_size()
    if world == 1:
        return metrics
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, metrics)
    out: dict[str, float] = {}
    for key in list(metrics) + sorted({k for m in gathered for k in m} - metrics.keys()):
        reports = [m for m in gathered if key in m]
        if key in SUMMED_METRICS:
            out[key] = sum(float(m[key]) for m in reports)
            continue
        weights = [float(m.get(weight, 0.0)) if weight else 1.0 for m in reports]
        if sum(weights) <= 0:  # no process trained on anything: a plain mean
            weights = [1.0] * len(reports)
        out[key] = sum(w * float(m[key]) for w, m in zip(weights, reports, strict=True)) / sum(
            weights
        )
    return out


def barrier() -> None:
    """Wait for every process (a no-op in one)."""
    if world_size() > 1:
        dist.barrier()


def leave_process_group() -> None:
    """Wait for every process, then tear the process group down (a no-op without one): what
    each process of a run does once its work is done. A process that exits with the group still
    up may be aborted by the C++ runtime as its threads are torn down (SIGABRT, "terminate called
    without an active exception"): 4 of 40 two-process gloo runs here, none of 40 with this."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
