"""Agent programs run as Ray tasks, one per run, on any node of the cluster; the gateway they
call and the store stay on the driver. Imports ray (the optional extra): ``AgentRunner`` imports
this module only when asked to run on Ray."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import ray

from trajforge.agent_programs.program import KILL_GRACE_S, AgentExit, finished, kill_group
from trajforge.distributed import LOCAL, RayOptions, ray_cluster


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the program's process group, SIGKILL what is left after the grace, reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(KILL_GRACE_S)
    kill_group(process.pid)
    process.wait()


def run_agent(
    argv: list[str], env: Mapping[str, str], stdin: str, timeout_s: float | None
) -> AgentExit:
    """One run of the program in its own process group on the node running this task."""
    process = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **env},
        start_new_session=True,
    )
    try:
        out, err = process.communicate(stdin.encode(), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop_group(process)
        return AgentExit(None, "", "")
    except BaseException:  # cancelled by the driver (ray.cancel raises KeyboardInterrupt)
        _stop_group(process)
        raise
    kill_group(process.pid)
    return finished(process.returncode, out, err)


class RayAgentLauncher:
    """An ``AgentLauncher`` that runs each program as a Ray task reserving ``cpus`` CPUs.

    Attributes:
        host: Where the driver's gateway must listen for the programs to reach it:
            127.0.0.1 on a local cluster, this node's address on an existing one.
    """

    def __init__(self, options: RayOptions) -> None:
        self._task = ray.remote(num_cpus=options.cpus_per_actor, max_retries=0)(run_agent)
        local = options.address == LOCAL
        self.host = "127.0.0.1" if local else ray.util.get_node_ip_address()

    async def __call__(
        self, argv: list[str], env: Mapping[str, str], stdin: str, timeout_s: float | None
    ) -> AgentExit:
        ref = self._task.remote(argv, dict(env), stdin, timeout_s)
        try:
            exit_: AgentExit = await ref
        except BaseException:
            ray.cancel(ref)
            raise
        return exit_


@contextmanager
def ray_agents(options: RayOptions) -> Iterator[RayAgentLauncher]:
    """The cluster ``options`` name joined for the block, with a launcher of agent programs."""
    with ray_cluster(options.address):
        yield RayAgentLauncher(options)
