"""The rollout actor: its own environments and policy replica, playing one episode per call."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import ray

from trajforge.distributed.options import POLICY_VERSION, SeatPlan, Snapshot
from trajforge.envs import get_env
from trajforge.policy import HFPolicy, Policy
from trajforge.rollout import (
    EpisodeKey,
    PlayedEpisode,
    RolloutError,
    RolloutSpec,
    new_episode,
    play_game,
    user_policy_for,
)

KEPT_SPECS = 8
"""Runs whose parsed spec an actor keeps (RL plays one run per step, a few at once ahead)."""

KEPT_SNAPSHOTS = 8
"""Earlier weights an actor keeps loaded as opponents (a self-play pool's members), the
most recently played; one played again after it was dropped is fetched again."""


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
        self._make_game = entry.game
        self._policy = spec.policy.load(expert=entry.expert)
        # The simulated user as a run in one process has it, its side recorded the same way.
        self._user = user_policy_for(spec, entry.scripted_user, self._policy)
        self._specs: dict[str, RolloutSpec] = {}
        self._version: int | None = None
        self._loaded = asyncio.Condition()
        self._failed: str | None = None
        self._snapshots: dict[str, Policy] = {}
        self._playing: dict[str, int] = {}
        self._snapshot_lock = asyncio.Lock()

    async def ready(self) -> str:
        """The name of the policy this actor samples from (the call returns once it is built)."""
        return self._policy.name

    async def set_weights(self, state: dict[str, Any], version: int) -> None:
        """Load ``state`` into the policy once the sequences in flight end (a later turn of an
        episode under way samples from it); episodes that need ``version`` wait for it."""
        try:
            if not isinstance(self._policy, HFPolicy):
                raise RolloutError(f"policy {self._policy.name}: has no weights to set")
            # On a thread: the swap waits for the policy's own thread to end in-flight turns;
            # the turns sampled from then on record ``version`` (a partial rollout's later
            # turns, the trainer's newer weights).
            await asyncio.to_thread(self._policy.set_weights, state, version=version)
        except Exception as exc:
            self._failed = f"weights {version} failed to load: {exc}"
            raise
        finally:
            async with self._loaded:
                if self._failed is None:
                    self._version = version
                self._loaded.notify_all()

    async def play(
        self,
        spec_json: str,
        key: EpisodeKey,
        version: int | None = None,
        seats: SeatPlan | None = None,
    ) -> PlayedEpisode:
        """Play episode ``key`` of the run ``spec_json`` describes (its env, policy and user
        this actor's) to its end, with weights of ``version`` or newer when a version is given;
        its trajectory and the simulated user's linked to it. With ``seats``, the episode is
        a game of the env's seats (``SeatPlan``): the primary seat's trajectory, the other
        seats' linked to it."""
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
        if seats is None:
            episode = new_episode(spec, key, self._make_env, self._policy, self._user)
            played = PlayedEpisode(await episode.play(), episode.linked)
        else:
            played = await self._play_game(spec, key, seats)
        if started_with is not None:
            for trajectory in (played.trajectory, *played.linked):
                trajectory.metadata[POLICY_VERSION] = started_with
        return played

    async def _play_game(
        self, spec: RolloutSpec, key: EpisodeKey, seats: SeatPlan
    ) -> PlayedEpisode:
        if self._make_game is None:
            raise RolloutError(f"env {spec.env!r} is no multi-seat game")
        make_game = self._make_game
        policies: dict[str, Policy] = {}
        names = {s.name for s in seats.opponents.values()}
        for name in names:  # in use: not dropped before this game ends
            self._playing[name] = self._playing.get(name, 0) + 1
        try:
            for seat in make_game().seats:
                snapshot = seats.opponents.get(seat)
                policies[seat] = (
                    self._policy if snapshot is None else await self._opponent(snapshot)
                )
            return await play_game(spec, key, make_game, policies, seats.primary)
        finally:
            for name in names:
                self._playing[name] -= 1

    async def _opponent(self, snapshot: Snapshot) -> Policy:
        """``snapshot``'s weights in a copy of this actor's policy (as the driver's pool copies
        its policy), loaded the first time it is played and kept by name."""
        # One load at a time: games starting together against a new snapshot load it once.
        async with self._snapshot_lock:
            kept = self._snapshots.pop(snapshot.name, None)
            if kept is None:
                kept = await self._load_snapshot(snapshot)
            self._snapshots[snapshot.name] = kept  # now the most recently played
            idle = [n for n in self._snapshots if not self._playing.get(n)]
            for name in idle[: max(0, len(self._snapshots) - KEPT_SNAPSHOTS)]:
                await self._snapshots.pop(name).close()  # the least recently played
            return kept

    async def _load_snapshot(self, snapshot: Snapshot) -> Policy:
        if not isinstance(self._policy, HFPolicy):
            raise RolloutError(f"policy {self._policy.name}: has no weights to snapshot")
        # Awaiting the nested reference fetches the weights from the object store.
        state = await snapshot.weights
        policy = HFPolicy(
            copy.deepcopy(self._policy.model),
            self._policy.tokenizer,
            max_batch_size=self._policy.max_batch_size,
            name=f"{self._policy.name}@{snapshot.name}",
        )
        await asyncio.to_thread(policy.set_weights, state)
        return policy

    async def close(self) -> None:
        """Release the policies (their models, their HTTP clients)."""
        if self._user is not None and self._user is not self._policy:
            await self._user.close()
        for opponent in self._snapshots.values():
            await opponent.close()
        await self._policy.close()


def remote_worker(cpus: float) -> Any:
    """``RolloutWorker`` as a Ray actor class reserving ``cpus`` CPUs per actor."""
    return ray.remote(num_cpus=cpus)(RolloutWorker)
