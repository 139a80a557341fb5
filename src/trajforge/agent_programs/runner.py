"""``AgentRunner``: the ``EpisodeRunner`` whose episodes are runs of an agent program, each
against its own session of a gateway that records the program's model calls.

``open_rollout`` drives it like any runner, so a collection is a ``RolloutSpec`` like every
other rollout: its tasks (an env's sample or a list), ``n``, ``concurrency``, run id, store
(resume, the store hook, progress) and ``limits.episode_timeout_s``, after which the program and
everything it started are killed. The program's own calls decide its turns, tokens and
sampling; the spec's ``policy`` is the model the gateway serves (``open_gateway``: a model here,
or another server forwarded). The program runs here or, with ``ray``, as a Ray task per run
(``ray_launch``); the gateway serves on a thread of this process while the runner is started.

A run that exits non-zero is ``error`` and one killed at its timeout is ``timeout``, both with
the tail of stderr and marked lost to the infrastructure; a run that reports no reward is judged
by the environment's verifier, when it has one. An episode's trajectory is the best-rewarded one
its session recorded (the first among equals; an empty one when the program made no model
call), with the episode's sample index, or the last segment of its chain where the program
rewrote its history; the session's others (forks for ``n`` > 1 choices, sub-agents, the earlier
segments) are linked to it and stored beside it. Nothing is stored before
a run ends, so an interrupted collection resumes by running its unfinished programs again.
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractContextManager, AsyncExitStack
from functools import partial
from typing import TYPE_CHECKING, Any

from trajforge.agent_programs.confine import Confinement, Setup, confined
from trajforge.agent_programs.program import (
    AgentLauncher,
    agent_argv,
    agent_environment,
    launch_here,
)
from trajforge.distributed import RayOptions
from trajforge.envs import get_env, stored_env_name
from trajforge.errors import ConfigError
from trajforge.judge import VerifierScorer
from trajforge.rollout import (
    EpisodeKey,
    EpisodeRunner,
    PlayedEpisode,
    RolloutError,
    RolloutRun,
    RolloutSpec,
    as_they_finish,
    group_id_for,
)
from trajforge.schema import OutcomeStatus, Task, Trajectory, Verifier
from trajforge.serve import ChatGateway, open_gateway, serving

if TYPE_CHECKING:
    from trajforge.agent_programs.ray_launch import RayAgentLauncher

Told = Callable[[Task], tuple[str | None, dict[str, Any]]]


def launched_on_ray(options: RayOptions) -> AbstractContextManager[RayAgentLauncher]:
    """The cluster ``options`` name, joined while the block runs, with a launcher that runs
    each program as a Ray task (a clear error when ray is not installed)."""
    try:
        # lazy: ray takes seconds to import and is an optional extra
        from trajforge.agent_programs.ray_launch import ray_agents
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"ray: {exc.name} is not installed; install the extra: pip install 'trajforge[ray]'"
        ) from None
    return ray_agents(options)


class AgentRunner(EpisodeRunner):
    """Plays each episode of a run as one run of the agent program ``agent``.

    Args:
        agent: The command line that runs the program once (``python agent.py``; a leading
            ``python`` is this interpreter).
        gateway: A gateway to record through, kept open by the caller (RL: one over the very
            policy it trains); ``None``: opened from the spec's policy by ``start``, with no
            store of its own, and closed by ``close``.
        ray: Run the programs as Ray tasks on this cluster (``None``: here).
        told: What each run's model is told beside the program's own prompt, added to the
            system message of every call of its session, and the trajectory metadata that
            records it (``Memory.told``: the lessons of an experience memory for the task).
        confine: Run each program confined (``confine``: bubblewrap, a fresh workspace and
            home, no network but the gateway, no keys); ``None``: as it is, here.
        setup: What each confined run adds to its command, environment and files (a harness
            recipe, ``harnesses``).
    """

    def __init__(
        self,
        agent: str,
        *,
        gateway: ChatGateway | None = None,
        ray: RayOptions | None = None,
        told: Told | None = None,
        confine: Confinement | None = None,
        setup: Setup | None = None,
    ) -> None:
        if setup is not None and confine is None:
            raise ConfigError("setup: a run set up by a recipe is a confined run; give confine")
        self.argv = agent_argv(agent)
        self._confine = confine
        self._setup = setup
        self._live = gateway
        self._ray = ray
        self._told = told
        self._gateway: ChatGateway | None = None
        self._launch: AgentLauncher = launch_here
        self._url = ""
        self._verifier: Verifier | None = None
        self._stack = AsyncExitStack()

    async def start(self, spec: RolloutSpec) -> str:
        if spec.context is not None:
            raise RolloutError(
                "spec.context: an agent program keeps its own context; context policies are "
                "for env episodes"
            )
        host = "127.0.0.1"
        if self._ray is not None:
            launcher = self._stack.enter_context(launched_on_ray(self._ray))
            self._launch, host = launcher, launcher.host
        if self._confine is not None:
            if host != "127.0.0.1":
                raise ConfigError(
                    "confine: confined runs reach the gateway through a socket on this machine; "
                    "run them here or on a local Ray cluster"
                )
            self._launch = confined(self._launch, self._confine, self._setup)
        gateway = self._live
        if gateway is not None and spec.policy is not None:
            raise RolloutError("spec.policy: the gateway is passed live too; give it once")
        if gateway is not None and gateway.recorder.store is not None:
            raise RolloutError(
                "gateway: an agent rollout's gateway stores nothing itself (the run's store "
                "takes each run as it ends); open it with store=None"
            )
        if gateway is None:
            if spec.policy is None:
                raise RolloutError("spec.policy: name the model the gateway serves")
            # Trajectories are stored as their runs end (the run's store hook), never mid-run.
            gateway, _ = open_gateway(
                spec.policy, None, spec.run_id or "", env=stored_env_name(spec.env)
            )
            self._stack.push_async_callback(gateway.close)
        self._gateway = gateway
        if spec.env is not None:
            # The env is made for its verifier alone; it is closed with the runner.
            env = get_env(spec.env).make()
            self._stack.push_async_callback(env.close)
            self._verifier = getattr(env, "verifier", None)
        self._url = self._stack.enter_context(serving(gateway, host=host))
        return gateway.model_names[0]

    def play(self, run: RolloutRun) -> AsyncGenerator[PlayedEpisode, None]:
        return as_they_finish(run.todo, partial(self._run, run), run.spec.concurrency)

    async def close(self) -> None:
        await self._stack.aclose()

    async def _run(self, run: RolloutRun, key: EpisodeKey) -> PlayedEpisode:
        assert self._gateway is not None, "start() opens the gateway"
        recorder = self._gateway.recorder
        session_id = f"{run.run_id}.{key.task.id}.{key.sample_index}"
        text, annotations = self._told(key.task) if self._told is not None else (None, None)
        session = recorder.open(
            session_id,
            key.task,
            run_id=run.run_id,
            group_id=group_id_for(run.run_id, key.task.id),
            metadata={"sample": key.sample_index},
            system_text=text,
            annotations=annotations,
        )
        timeout_s = run.spec.limits.episode_timeout_s
        told = agent_environment(
            f"{self._url}/sessions/{session_id}",
            self._gateway.model_names[0],
            key.task,
            run.spec.sampling.temperature,
        )
        done = await self._launch(self.argv, told, key.task.model_dump_json(), timeout_s)
        if done.returncode is None:
            assert timeout_s is not None, "only a run with a timeout is killed"
            recorder.fail(session, OutcomeStatus.TIMEOUT, f"no exit after {timeout_s:g} s")
        elif done.returncode != 0:
            why = f"exit status {done.returncode}" + (f": {done.stderr}" if done.stderr else "")
            recorder.fail(session, OutcomeStatus.ERROR, why)
        elif session.reward is None and (printed := done.printed_reward) is not None:
            recorder.set_reward(session, printed, {})
        if session.reward is None and session.failure is None and self._verifier is not None:
            await recorder.score_each(session, VerifierScorer(self._verifier))
        return _episode(recorder.end(session), key.sample_index)


def _episode(trajectories: list[Trajectory], sample_index: int) -> PlayedEpisode:
    """The session's best-rewarded trajectory (the first among equals) as the episode's, the
    others linked to it; where the program rewrote its history, the last segment of that
    chain, which is the episode's trajectory (its earlier segments train with it)."""
    chained = [
        i for i, t in enumerate(trajectories) if t.segment is not None and not t.is_earlier_segment
    ]
    best = chained[0] if chained else max(
        range(len(trajectories)),
        key=lambda i: (-math.inf if trajectories[i].reward is None else trajectories[i].reward, -i),
    )  # fmt: skip
    main = trajectories[best].model_copy(update={"sample_index": sample_index})
    return PlayedEpisode(main, [t for i, t in enumerate(trajectories) if i != best])
