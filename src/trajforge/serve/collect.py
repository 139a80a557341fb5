"""``collect``: run an agent program once per task and sample, each against its own gateway
session, and account for every run.

The program is started in its own process group with ``OPENAI_BASE_URL`` pointing at its
session, ``OPENAI_API_KEY`` set, and the task as JSON in ``TRAJFORGE_TASK`` and on stdin. Its
reward is, in order: one posted to ``$TRAJFORGE_SESSION_URL/reward``, a ``{"reward": x}`` last
JSON line on stdout, or the environment's verifier on each recorded trajectory. A run that exits
non-zero is ``error`` and one that outlives ``timeout_s`` is killed (its whole process group)
and ``timeout``, both with the tail of stderr; a run that made no model call still leaves one
empty trajectory, so the store holds every task x sample. The programs run here
(``launch_here``) or wherever a given ``AgentLauncher`` starts them (Ray tasks:
``trajforge.distributed``); the gateway and the store stay in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trajforge.distributed import RayOptions
from trajforge.envs.registry import get_env
from trajforge.errors import ConfigError
from trajforge.judge.scorer import VerifierScorer
from trajforge.policy.token_policy import TokenPolicy
from trajforge.schema import OutcomeStatus, Score, Task, Trajectory
from trajforge.schema.evidence import Verifier
from trajforge.serve.gateway import ChatGateway, Gateway
from trajforge.serve.recorder import GatewaySession
from trajforge.serve.server import serving
from trajforge.store import TrajectoryStore
from trajforge.train.config import RLConfig

if TYPE_CHECKING:
    from trajforge.serve.ray_agents import RayAgentLauncher

STDERR_TAIL_CHARS = 2000
KILL_GRACE_S = 2.0


@dataclass(frozen=True)
class AgentRun:
    """One task x sample: what the program did and what was stored for it."""

    session: str
    task_id: str
    sample: int
    status: OutcomeStatus
    reward: float | None
    trajectories: int


@dataclass(frozen=True)
class AgentExit:
    """How one run of the agent program ended."""

    returncode: int | None
    """Its exit status (``None``: killed, with everything it started, after the timeout)."""
    stdout: str
    stderr: str
    """The last ``STDERR_TAIL_CHARS`` of it."""


AgentLauncher = Callable[[list[str], Mapping[str, str], str, float], Awaitable[AgentExit]]
"""``launch(argv, env, stdin, timeout_s)``: run the program once in its own process group,
with ``env`` set over the environment it inherits and ``stdin`` as its input; kill the group
after ``timeout_s`` or when cancelled."""


async def launch_here(
    argv: list[str], env: Mapping[str, str], stdin: str, timeout_s: float
) -> AgentExit:
    """Run the program once in this machine's process tree (the default launcher)."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **env},
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(stdin.encode()), timeout_s)
    except TimeoutError:
        await _kill_group(process)
        return AgentExit(None, "", "")
    except BaseException:
        await _kill_group(process)
        raise
    _kill_stragglers(process)
    return AgentExit(
        process.returncode,
        out.decode(errors="replace"),
        err.decode(errors="replace")[-STDERR_TAIL_CHARS:],
    )


def agents_on_ray(options: RayOptions) -> AbstractContextManager[RayAgentLauncher]:
    """The cluster ``options`` name, joined while the block runs, with a launcher that runs
    each agent program as a Ray task (a clear error when ray is not installed)."""
    try:
        # lazy: ray takes seconds to import and is an optional extra
        from trajforge.serve.ray_agents import ray_agents
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"ray: {exc.name} is not installed; install the extra: pip install 'trajforge[ray]'"
        ) from None
    return ray_agents(options)


def collect_runs(
    gateway: ChatGateway,
    agent: str,
    tasks: Sequence[Task],
    *,
    n: int,
    concurrency: int,
    timeout_s: float,
    env: str | None = None,
    on_done: Callable[[AgentRun], None] | None = None,
    launch: AgentLauncher = launch_here,
    host: str = "127.0.0.1",
) -> list[AgentRun]:
    """Serve ``gateway`` on ``host`` for as long as ``agent`` runs (started by ``launch``) for
    every task x ``n``; runs that report no reward are judged by ``env``'s verifier, when it
    has one."""
    verifier = env_verifier(env) if env else None
    with serving(gateway, host=host) as url:
        collector = Collector(
            gateway, url, agent, timeout_s=timeout_s, verifier=verifier, launch=launch
        )
        return asyncio.run(collector.run(tasks, n, concurrency, on_done=on_done))


def env_verifier(env: str) -> Verifier | None:
    """The verifier of environment ``env`` (an env without one gives no reward)."""
    return getattr(get_env(env).make(), "verifier", None)


def agent_argv(agent: str) -> list[str]:
    """The command line of ``agent``; a leading ``python`` (or ``python3``) is the interpreter
    trajforge runs under, so the agent sees the same packages whatever the PATH holds."""
    argv = shlex.split(agent)
    if not argv:
        raise ConfigError("--agent: give the command that runs the agent, e.g. 'python agent.py'")
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    return argv


def _last_json_reward(stdout: str) -> float | None:
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and isinstance(value.get("reward"), int | float):
            return float(value["reward"])
        return None
    return None


class Collector:
    """Run ``agent`` for tasks against a gateway already serving at ``base_url``.

    Args:
        gateway: the gateway (its recorder holds the sessions).
        base_url: where it listens (``http://127.0.0.1:port``).
        agent: the command line of the agent program.
        timeout_s: wall-clock limit of one run.
        verifier: the environment's verifier, for runs that report no reward.
        launch: what starts the program (default: a process here).
    """

    def __init__(
        self,
        gateway: ChatGateway,
        base_url: str,
        agent: str,
        *,
        timeout_s: float,
        verifier: Verifier | None = None,
        launch: AgentLauncher = launch_here,
    ) -> None:
        self.gateway = gateway
        self.launch = launch
        self.base_url = base_url
        self.argv = agent_argv(agent)
        self.timeout_s = timeout_s
        self.verifier = verifier

    async def run(
        self,
        tasks: Sequence[Task],
        n: int,
        concurrency: int,
        on_done: Callable[[AgentRun], None] | None = None,
    ) -> list[AgentRun]:
        """Every task x sample, ``concurrency`` at a time, in task order."""
        gate = asyncio.Semaphore(concurrency)
        run_id = self.gateway.recorder.run_id

        async def one(task: Task, sample: int) -> AgentRun:
            async with gate:
                done = await self._run_one(task, sample, f"{run_id}.{task.id}.{sample}")
            if on_done is not None:
                on_done(done)
            return done

        jobs = [one(task, k) for task in tasks for k in range(n)]
        return list(await asyncio.gather(*jobs))

    async def _run_one(self, task: Task, sample: int, session_id: str) -> AgentRun:
        recorder = self.gateway.recorder
        session = recorder.open(
            session_id,
            task,
            group_id=f"{recorder.run_id}.{task.id}",
            metadata={"sample": sample},
        )
        task_json = task.model_dump_json()
        env = {
            "OPENAI_BASE_URL": f"{self.base_url}/sessions/{session_id}/v1",
            "OPENAI_API_KEY": "trajforge",
            "TRAJFORGE_MODEL": self.gateway.model_names[0],
            "TRAJFORGE_SESSION_URL": f"{self.base_url}/sessions/{session_id}",
            "TRAJFORGE_TASK": task_json,
        }
        done = await self.launch(self.argv, env, task_json, self.timeout_s)
        if done.returncode is None:
            recorder.fail(session, OutcomeStatus.TIMEOUT, f"no exit after {self.timeout_s:g} s")
        elif done.returncode != 0:
            why = f"exit status {done.returncode}" + (f": {done.stderr}" if done.stderr else "")
            recorder.fail(session, OutcomeStatus.ERROR, why)
        elif session.reward is None:
            reward = _last_json_reward(done.stdout)
            if reward is not None:
                recorder.set_reward(session, reward, {})
        if session.reward is None and session.failure is None and self.verifier is not None:
            await self._verify(session)
        trajectories = recorder.save_all(session)
        return AgentRun(
            session=session_id,
            task_id=task.id,
            sample=sample,
            status=_run_status(trajectories),
            reward=session.reward if session.reward is not None else _best(trajectories),
            trajectories=len(trajectories),
        )

    async def _verify(self, session: GatewaySession) -> None:
        assert self.verifier is not None, "runs only judged by a verifier come here"
        scorer = VerifierScorer(self.verifier)
        for recording in session.recordings:
            trajectory = self.gateway.recorder.trajectory(session, recording)
            score: Score = await scorer(trajectory)
            recording.reward = score.value
            recording.scores = [score]


def _run_status(trajectories: list[Trajectory]) -> OutcomeStatus:
    statuses = {t.outcome.status for t in trajectories}
    for status in (OutcomeStatus.TIMEOUT, OutcomeStatus.ERROR, OutcomeStatus.OK):
        if status in statuses:
            return status
    return OutcomeStatus.TRUNCATED


def _best(trajectories: list[Trajectory]) -> float | None:
    rewards = [t.reward for t in trajectories if t.reward is not None]
    return max(rewards) if rewards else None


async def _kill_group(process: asyncio.subprocess.Process) -> None:
    """Stop the program and everything it started: SIGTERM to its process group, SIGKILL to
    whatever is left after a grace period, then reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), KILL_GRACE_S)
    _kill_stragglers(process)
    await process.wait()


def _kill_stragglers(process: asyncio.subprocess.Process) -> None:
    """SIGKILL what is left of the program's process group (children it left running)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def agent_rollouts(
    agent: str,
    *,
    n: int,
    concurrency: int,
    timeout_s: float,
    env: str | None,
    store_path: Path | None,
) -> Callable[[str, list[Task], TokenPolicy], list[Trajectory]]:
    """RL rollouts from an agent program (``RLTrainer(agent_rollouts=...)``): each call runs
    ``agent`` for every task ``n`` times against a gateway over the live policy, so every model
    call samples from the weights being trained, and returns the recorded trajectories."""

    def rollouts(run_id: str, tasks: list[Task], policy: TokenPolicy) -> list[Trajectory]:
        store = TrajectoryStore(store_path) if store_path is not None else None
        try:
            gateway = Gateway(policy, store, run_id, env=env)
            collect_runs(
                gateway, agent, tasks, n=n, concurrency=concurrency, timeout_s=timeout_s, env=env
            )
        finally:
            if store is not None:
                store.close()
        recorder = gateway.recorder
        return [t for s in recorder.sessions.values() for t in recorder.trajectories(s)]

    return rollouts


def agent_rollouts_for(
    cfg: RLConfig,
) -> Callable[[str, list[Task], TokenPolicy], list[Trajectory]] | None:
    """The agent rollouts an RL config asks for (``agent``), or ``None`` for env episodes."""
    if cfg.agent is None:
        return None
    return agent_rollouts(
        cfg.agent,
        n=cfg.samples_per_group,
        concurrency=cfg.agent_concurrency,
        timeout_s=cfg.agent_timeout_s,
        env=cfg.env,
        store_path=cfg.store,
    )
