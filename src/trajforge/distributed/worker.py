"""The rollout actor: its own environments and policy replica, playing one episode per call."""

from __future__ import annotations

import asyncio
from typing import Any

import ray

from trajforge.distributed.options import POLICY_VERSION
from trajforge.envs.registry import get_env
from trajforge.rollout import EpisodeKey, PlayedEpisode, RolloutError, RolloutSpec, new_episode
from trajforge.rollout.engine import user_policy_for

KEPT_SPECS = 8
"""Runs whose parsed spec an actor keeps (RL plays one run per step, a few at once ahead)."""


class RolloutWorker:
    """Plays episodes of the runs it is given (an async actor: its episodes share its event
    loop, so a policy with dynamic batching batches them).

    Args:
        spec_json: A rollout's spec; the environment and policy are built from its references,
            and every run the actor plays names the same two.
    """

    def __init__(self, spec_json: str) -> None:
        spec = RolloutSpec.model_validate_json(spec_json)
        if spec.env is None or spec.policy is None:
            raise RolloutError("a Ray actor builds its environment and policy from their names")
        entry = get_env(spec.env)
        self._make_env = entry.make
        self._policy = spec.policy.load(expert=entry.expert)
        # The simulated user as a run in one process has it, its side recorded the same way.
        self._user = user_policy_for(spec, entry.scripted_user, self._policy)
        self._specs: dict[str, RolloutSpec] = {}
        self._version: int | None = None
        self._loaded = asyncio.Condition()
        self._failed: str | None = None

    async def ready(self) -> str:
        """The name of the policy this actor samples from (the call returns once it is built)."""
        return self._policy.name

    async def set_weights(self, state: dict[str, Any], version: int) -> None:
        """Load ``state`` into the policy once the sequences in flight end (a later turn of an
        episode under way samples from it); episodes that need ``version`` wait for it."""
        try:
            load = getattr(self._policy, "set_weights", None)
            if load is None:
                raise RolloutError(f"policy {self._policy.name}: has no weights to set")
            # On a thread: the swap waits for the policy's own thread to end in-flight turns.
            await asyncio.to_thread(load, state)
        except Exception as exc:
            self._failed = f"weights {version} failed to load: {exc}"
            raise
        finally:
            async with self._loaded:
                if self._failed is None:
                    self._version = version
                self._loaded.notify_all()

    async def play(
        self, spec_json: str, key: EpisodeKey, version: int | None = None
    ) -> PlayedEpisode:
        """Play episode ``key`` of the run ``spec_json`` describes (its env, policy and user
        this actor's) to its end, with weights of ``version`` or newer when a version is given;
        its trajectory and the simulated user's linked to it."""
        if version is not None:
            async with self._loaded:
                await self._loaded.wait_for(
                    lambda: (
                        self._failed is not None
                        or (self._version is not None and self._version >= version)
                    )
                )
            if self._failed is not None:
                raise RolloutError(self._failed)
        spec = self._specs.get(spec_json)
        if spec is None:
            if len(self._specs) >= KEPT_SPECS:  # the oldest run's
                del self._specs[next(iter(self._specs))]
            spec = self._specs[spec_json] = RolloutSpec.model_validate_json(spec_json)
        started_with = self._version
        episode = new_episode(spec, key, self._make_env, self._policy, self._user)
        trajectory = await episode.play()
        if started_with is not None:
            for played in (trajectory, *episode.linked):
                played.metadata[POLICY_VERSION] = started_with
        return PlayedEpisode(trajectory, episode.linked)

    async def close(self) -> None:
        """Release the policies (their models, their HTTP clients)."""
        if self._user is not None and self._user is not self._policy:
            await self._user.close()
        await self._policy.close()


def remote_worker(cpus: float) -> Any:
    """``RolloutWorker`` as a Ray actor class reserving ``cpus`` CPUs per actor."""
    return ray.remote(num_cpus=cpus)(RolloutWorker)
