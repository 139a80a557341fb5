"""Where an RL step's episodes come from, and the weights they sample with.

A step's episodes come from one ``StepRunner``, chosen once when the trainer starts.

Four sources: the live rollout policy in this process (``LocalRollouts``), the Ray actors
(``RayRollouts``), self-play over a multi-seat game, played here or on the actors
(``SelfPlayRollouts``), and an agent program whose model calls the live policy answers
(``AgentRollouts``). Each runs a step's episodes as a coroutine, on the thread
``pipeline.RolloutThread`` gives it; ``hooks`` see each episode end (the stall watchdog).

The rollout policy (``RolloutWeights``) is an ``HFPolicy`` over the trained module itself, or
over a copy of its weights of its own (bf16, asynchronous rollouts, LoRA merged in, or gathered
under FSDP) refreshed after every update; on Ray the actors get the weights published to them. Either way
the weights carry the trainer's update count as their version, which every sampled turn
records.
Only the main process rolls out, so only it holds a policy.
"""

from __future__ import annotations

import asyncio
import copy
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from trajforge.errors import ConfigError
from trajforge.policy import HFPolicy, TokenPolicy, VisionPolicy
from trajforge.precision import Precision, resolve_precision, torch_dtype
from trajforge.rollout import (
    EpisodeRunner,
    Limits,
    PolicyRef,
    RolloutHook,
    RolloutSpec,
    arun_rollout,
)
from trajforge.schema import Trajectory
from trajforge.train.config import RLConfig
from trajforge.train.model import TrainParts
from trajforge.train.rl.segments import EarlierSegments

if TYPE_CHECKING:
    from trajforge.distributed import RayRunner
    from trajforge.train.rl.self_play import SelfPlay


class AgentRunners(Protocol):
    """``runner(policy)``: the ``EpisodeRunner`` that plays a step's episodes as runs of the
    config's agent program, whose model calls ``policy`` answers; the layer above training
    provides it (``trajforge.agent_programs.agent_runners``), since training sits below the
    gateway."""

    @property
    def metadata(self) -> dict[str, Any]:
        """What each step's run records of the program (its command or harness, its
        confinement), as ``trajforge collect`` records it."""

    def __call__(self, policy: TokenPolicy) -> EpisodeRunner: ...


class StepRunner(ABC):
    """Plays one RL step's episodes."""

    @abstractmethod
    async def rollout(
        self, spec: RolloutSpec, step: int, hooks: Sequence[RolloutHook] = ()
    ) -> list[Trajectory]:
        """The trajectories to score and train on for ``spec`` (the step's tasks and samples,
        its policy being the trainer's) at step ``step``, with the earlier segments of the
        episodes whose context was rewritten; ``hooks`` see the run."""


class LocalRollouts(StepRunner):
    """Episodes played in this process by the live policy: it samples from the very weights
    being trained (or their copy, refreshed after each update), or a vLLM server following
    them."""

    def __init__(self, policy: TokenPolicy) -> None:
        self.policy = policy

    async def rollout(
        self, spec: RolloutSpec, step: int, hooks: Sequence[RolloutHook] = ()
    ) -> list[Trajectory]:
        earlier = EarlierSegments()
        episodes = await arun_rollout(spec, policy=self.policy, hooks=[*hooks, earlier])
        return [*episodes, *earlier.trajectories]


class RayRollouts(StepRunner):
    """Episodes played on the Ray actors, each building ``actors`` and loading the published
    weights."""

    def __init__(self, remote: RayRunner, actors: PolicyRef) -> None:
        self.remote = remote
        self.actors = actors

    async def rollout(
        self, spec: RolloutSpec, step: int, hooks: Sequence[RolloutHook] = ()
    ) -> list[Trajectory]:
        earlier = EarlierSegments()
        played = spec.model_copy(update={"policy": self.actors})
        episodes = await arun_rollout(played, runner=self.remote, hooks=[*hooks, earlier])
        return [*episodes, *earlier.trajectories]


class SelfPlayRollouts(StepRunner):
    """A multi-seat game's episodes, every seat's trajectory or the trained seat's; on Ray
    (``actors`` given) its games are played by ``SelfPlay.remote``'s actors."""

    def __init__(self, self_play: SelfPlay, policy: HFPolicy, actors: PolicyRef | None) -> None:
        self.self_play = self_play
        self.policy = policy
        self.actors = actors

    async def rollout(
        self, spec: RolloutSpec, step: int, hooks: Sequence[RolloutHook] = ()
    ) -> list[Trajectory]:
        if self.actors is not None:
            spec = spec.model_copy(update={"policy": self.actors})
        # A game's runs are its own (one per seat against a pool): played on a thread, they
        # end when the step's policy or actors are closed rather than by cancelling.
        return await asyncio.to_thread(self.self_play.rollout, spec, self.policy, step)


@dataclass(eq=False, repr=False)
class AgentRollouts(StepRunner):
    """Runs of an agent program against a gateway over the live policy, bounded by the
    config's ``agent_timeout_s`` and ``agent_concurrency``; a run sampled at another
    temperature than the trainer scores is refused."""

    runners: AgentRunners
    policy: TokenPolicy
    cfg: RLConfig

    async def rollout(
        self, spec: RolloutSpec, step: int, hooks: Sequence[RolloutHook] = ()
    ) -> list[Trajectory]:
        # The program makes its own calls; the config bounds each run's time and how many run
        # at once.
        limits = Limits(episode_timeout_s=self.cfg.agent_timeout_s)
        agent = spec.model_copy(
            update={"limits": limits, "concurrency": self.cfg.agent_concurrency}
        )
        # A program that rewrote its history played its episode as segments, trained together.
        earlier = EarlierSegments()
        played = await arun_rollout(
            agent, runner=self.runners(self.policy), hooks=[*hooks, earlier]
        )
        trajectories = [*played, *earlier.trajectories]
        check_sampled_temperature(trajectories, self.cfg.temperature)
        return trajectories


def check_sampled_temperature(trajs: Sequence[Trajectory], temperature: float) -> None:
    """Raise ``ConfigError`` naming the first trajectory a model call of which was sampled at
    another temperature than ``temperature`` (calls the gateway did not record pass).

    The trainer's log-probabilities are those of the policy tempered by the RL config's
    ``temperature``; an agent program chooses its own sampling, so a program that samples at
    another temperature would be trained as if it had not. The gateway records each call's
    temperature (``metadata["gateway"]["temperatures"]``)."""
    for traj in trajs:
        sampled = traj.metadata.get("gateway", {}).get("temperatures", [])
        for t in sampled:
            if not math.isclose(t, temperature, rel_tol=0, abs_tol=1e-6):
                raise ConfigError(
                    f"rl.temperature is {temperature:g} but the agent program sampled at {t:g} "
                    f"(trajectory {traj.id}): the trainer scores the policy at the temperature "
                    "the rollouts were sampled at, so make them equal (the program is told it "
                    "as TRAJFORGE_TEMPERATURE)"
                )


class RolloutWeights:
    """The rollout policy (``None`` off the main process) and the weights behind it.

    Args:
        parts: The trained model's parts.
        cfg: The run's config (``rollout_precision``, ``async_staleness``, batch size).
    """

    def __init__(self, parts: TrainParts, cfg: RLConfig) -> None:
        self.parts = parts
        self.cfg = cfg
        if cfg.rollout_precision is Precision.AUTO:
            resolved = resolve_precision(cfg.model.precision, "model.precision")
        else:
            resolved = resolve_precision(cfg.rollout_precision, "rollout_precision")
        self.dtype: torch.dtype = torch_dtype(resolved)
        self.policy: TokenPolicy | None = self._make_policy()

    @property
    def precision(self) -> Precision:
        """The precision the rollouts sample at (what Ray's actors build their replica with)."""
        return Precision.BF16 if self.dtype is torch.bfloat16 else Precision.FP32

    @property
    def local(self) -> HFPolicy | None:
        """The rollout policy where it runs in this process (what self-play snapshots)."""
        return self.policy if isinstance(self.policy, HFPolicy) else None

    @property
    def own_weights(self) -> bool:
        """Whether rollouts sample from weights of their own: a bf16 copy, or rollouts that
        overlap training."""
        return self.dtype is torch.bfloat16 or self.cfg.async_staleness > 0

    def _make_policy(self) -> TokenPolicy | None:
        model = self.source()
        if not self.parts.accelerator.is_main_process:
            return None  # rollouts run on the main process
        if self.own_weights and model is self.parts.unwrapped_model():
            model = copy.deepcopy(model)
        if self.dtype is torch.bfloat16:
            model = model.to(torch.bfloat16)
        if self.parts.processor is not None:
            return VisionPolicy(model, self.parts.processor)
        return HFPolicy(
            model,
            self.parts.tokenizer,
            max_batch_size=self.cfg.max_batch_size,
            share_prefixes=not self.cfg.reference_path,
        )

    def source(self) -> Any:
        """The module the rollout weights come from: the trained one, or under LoRA with weights
        of their own a copy with the adapter merged in (a plain model the lean decoder runs,
        loaded into the rollout weights after each update). Under FSDP: a plain copy of the
        gathered weights (a collective), LoRA merged in, on the main process only."""
        if self.parts.sharded:
            gathered: Any = self.parts.gathered_model()
            return gathered.merge_and_unload() if gathered and self.parts.is_lora else gathered
        model: Any = self.parts.unwrapped_model()
        if self.parts.is_lora and self.own_weights:
            return copy.deepcopy(model).merge_and_unload()
        return model

    def refresh(self, version: int) -> None:
        """The trained weights into the rollout policy as ``version`` (the updates made so
        far; a mere synchronisation when it samples from the trained module itself). Turns of
        episodes under way wait for it and then sample from it."""
        source = self.source()
        if self.local is not None:
            self.local.set_weights(source, version=version)

    def mark(self, version: int) -> None:
        """The rollout weights are ``version`` (a run starting, or resumed, with nothing in
        flight): what the turns sampled from them record."""
        if self.local is not None:
            self.local.weights_version = version

    def close(self) -> None:
        """Stop the rollout policy (its worker, or the server it started)."""
        if self.policy is not None:
            asyncio.run(self.policy.close())

    def publish(self, remote: RayRunner | None, version: int) -> None:
        """On Ray, the trained weights (LoRA merged in) to the actors as ``version`` (the
        updates made so far); every process calls it, ``remote`` being the main one's."""
        if self.cfg.ray is None:
            return
        # Under FSDP the weights are gathered first, by every process (a collective).
        model: Any = self.source() if self.parts.sharded else None
        if remote is None:
            return  # not the main process
        if model is None:
            model = self.parts.unwrapped_model()
            if self.parts.is_lora:
                model = copy.deepcopy(model).merge_and_unload()
        remote.publish({k: v.detach().cpu() for k, v in model.state_dict().items()}, version)


def choose_runner(
    cfg: RLConfig,
    policy: TokenPolicy | None,
    *,
    precision: Precision,
    remote: RayRunner | None,
    self_play: SelfPlay | None,
    agent_runner: AgentRunners | None,
) -> StepRunner | None:
    """The runner ``cfg`` asks for (``None`` off the main process, which rolls out nothing).

    Args:
        cfg: The run's config (an agent program, self-play, Ray).
        policy: The live rollout policy (the main process's).
        precision: What Ray's actors build their replica with.
        remote: The Ray actors, when the run samples on them.
        self_play: The run's self-play, when it plays a game.
        agent_runner: What plays the agent program's runs, when the run has one.
    """
    if policy is None:
        return None
    if agent_runner is not None:
        return AgentRollouts(agent_runner, policy, cfg)
    # Each actor builds this policy, then loads the published weights.
    actors = PolicyRef(name=cfg.model.spec, batch_size=cfg.max_batch_size, precision=precision)
    if self_play is not None:
        # A game's pool snapshots the weights in this process (the config refuses a server).
        assert isinstance(policy, HFPolicy)
        return SelfPlayRollouts(self_play, policy, None if remote is None else actors)
    return LocalRollouts(policy) if remote is None else RayRollouts(remote, actors)
