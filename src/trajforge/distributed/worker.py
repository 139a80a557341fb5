"""The rollout actor: its own environments and policy replica, playing one episode per call."""

from __future__ import annotations

from typing import Any

import ray

from trajforge.envs.registry import get_env
from trajforge.rollout import EpisodeKey, RolloutError, RolloutSpec, new_episode
from trajforge.schema import Trajectory


class RolloutWorker:
    """Plays episodes of one rollout (an async actor: its episodes share its event loop, so a
    policy with dynamic batching batches them).

    Args:
        spec_json: The rollout's spec; the environment and policy are built from its references.
    """

    def __init__(self, spec_json: str) -> None:
        spec = RolloutSpec.model_validate_json(spec_json)
        if spec.env is None or spec.policy is None:
            raise RolloutError("a Ray actor builds its environment and policy from their names")
        entry = get_env(spec.env)
        self._spec = spec
        self._make_env = entry.make
        self._policy = spec.policy.load(expert=entry.expert)
        self._specs: dict[str, RolloutSpec] = {}

    async def ready(self) -> str:
        """The name of the policy this actor samples from (the call returns once it is built)."""
        return self._policy.name

    async def play(self, run_id: str, key: EpisodeKey) -> Trajectory:
        """Play episode ``key`` of run ``run_id`` to its end."""
        spec = self._specs.get(run_id)
        if spec is None:
            spec = self._specs[run_id] = self._spec.model_copy(update={"run_id": run_id})
        return await new_episode(spec, key, self._make_env, self._policy).play()

    async def close(self) -> None:
        """Release the policy (its model, its HTTP client)."""
        await self._policy.close()


def remote_worker(cpus: float) -> Any:
    """``RolloutWorker`` as a Ray actor class reserving ``cpus`` CPUs per actor."""
    return ray.remote(num_cpus=cpus)(RolloutWorker)
