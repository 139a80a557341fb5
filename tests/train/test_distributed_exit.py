"""``leave_process_group``: how every process of a run ends its part in the process group."""

from __future__ import annotations

import sys

import pytest
import torch.distributed as dist

from trajforge.train.distributed import leave_process_group
from trajforge.train.launch import free_port, launch_local

# A process of a run: joins the group as trajforge does, makes collectives, leaves and exits.
RANK_SCRIPT = """
from datetime import timedelta
import torch, torch.distributed as dist
from accelerate import PartialState
from trajforge.train.distributed import leave_process_group
PartialState(cpu=True, timeout=timedelta(seconds=60))
t = torch.ones(1000)
dist.all_reduce(t)
seen = [None, None]
dist.all_gather_object(seen, {"rank": dist.get_rank(), "sum": float(t.sum())})
assert [s["sum"] for s in seen] == [2000.0, 2000.0], seen
leave_process_group()
assert not dist.is_initialized()
"""

# Without ``leave_process_group`` about one run in ten ended with a process aborted at exit
# (SIGABRT, "terminate called without an active exception"): 4 of 40 here, and CI's two-process
# tests failed so. Sixteen runs all pass without it about one time in six.
RUNS = 16


def test_leave_process_group_tears_the_group_down() -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)  # fmt: skip
    leave_process_group()
    assert not dist.is_initialized()
    leave_process_group()  # without a group: nothing to do


@pytest.mark.slow
def test_every_process_of_many_two_process_runs_exits_cleanly() -> None:
    for _ in range(RUNS):  # launch_local raises DistributedError naming a rank killed by SIGABRT
        launch_local([sys.executable, "-c", RANK_SCRIPT], 2, grace_s=10, timeout_s=120)
