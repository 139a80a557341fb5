"""``RayRunner``: a rollout's episodes played on Ray actors, handed out as slots free up.

The driver keeps a queue of the episodes still to play. Each actor holds at most ``slots`` of
them at a time (``slots`` per run when several runs share the actors); when one comes back, the next episode goes to the actor that returned it, so
fast actors take more and a slow one never holds the run. An actor that dies (killed,
preempted, out of memory) takes none of the run with it: its unfinished episodes go back to the
front of the queue and it is replaced, up to ``max_restarts`` times over the run. Every
episode is yielded once, however often it was played.

A ``persistent`` runner keeps its actors from one run to the next (RL rolls out every step on
the same actors); ``publish`` puts new weights in the object store once and has every actor,
and every actor started later, load them. An episode handed out after a publish waits on its
actor for those weights, and its trajectory records the version it started with.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import threading
from collections import deque
from collections.abc import AsyncGenerator, Iterable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import ObjectLostError, RayActorError, RayTaskError

from trajforge.distributed.cluster import actor_count, ray_cluster
from trajforge.distributed.options import RayOptions, SeatPlan, Snapshot
from trajforge.distributed.worker import remote_worker
from trajforge.rollout import (
    EpisodeKey,
    EpisodeRunner,
    PlayedEpisode,
    RolloutError,
    RolloutRun,
    RolloutSpec,
)

DEFAULT_SLOTS = 8
"""Episodes an actor plays at once when neither the options nor the spec say."""

# What an actor's death looks like from the driver: its calls fail, or their results vanish.
_LOST = (RayActorError, ObjectLostError)


@dataclass(eq=False)
class _Actor:
    handle: Any


def _last_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(exc).__name__


class RayRunner(EpisodeRunner):
    """Plays a rollout's episodes on Ray actors.

    ``start`` joins the cluster ``options.address`` names unless this process has joined one
    already (then that one is used and left as it was); ``close`` stops the actors and leaves
    what ``start`` joined (a local cluster stops with it).

    Args:
        options: Cluster, actors, slots and restarts (default: a local cluster, one actor per
            CPU).
        persistent: Keep the actors and the cluster after a run (``close`` leaves them for the
            next run's ``start``; ``shutdown`` stops them).
    """

    def __init__(self, options: RayOptions | None = None, *, persistent: bool = False) -> None:
        self.options = options or RayOptions()
        self.persistent = persistent
        self._weights: tuple[Any, int] | None = None
        self._actors: list[_Actor] = []
        self._spec_json = ""
        # The actors' start, shared by runs that start together (RL's rollouts ahead, each on a
        # thread of its own): one starts them, the others wait for it.
        self._starting: concurrent.futures.Future[str] | None = None
        self._slots = DEFAULT_SLOTS
        self._restarts_left = self.options.max_restarts
        self._worker_class: Any = None
        self._cluster = ExitStack()
        self._joined = False
        # Runs may share a persistent runner from several threads (RL's rollouts ahead).
        self._lock = threading.Lock()
        self.replaced = 0
        """Actors that died during the run and were replaced."""

    @property
    def actors(self) -> list[Any]:
        """The live actors' handles."""
        return [a.handle for a in self._actors]

    async def start(self, spec: RolloutSpec) -> str:
        if spec.lockstep:
            raise RolloutError(
                "spec.lockstep: the lockstep baseline runs in one process, not on Ray"
            )
        if spec.env is None or spec.policy is None:
            raise RolloutError(
                "spec.env and spec.policy: Ray actors build the environment and the policy from "
                "their names; a live one stays in this process"
            )
        with self._lock:
            starting, first = self._starting, self._starting is None
            if starting is None:
                starting = self._starting = concurrent.futures.Future()
                # Running from the start: a waiter that is cancelled cannot cancel it for all.
                starting.set_running_or_notify_cancel()
        if not first:  # a persistent runner's actors, kept or being started by another run
            model = await asyncio.wrap_future(starting)
            built = RolloutSpec.model_validate_json(self._spec_json)
            if (spec.env, spec.policy, spec.user) != (built.env, built.policy, built.user):
                raise RolloutError(
                    f"spec.env, spec.policy and spec.user: the Ray actors play {built.env} with "
                    f"{built.policy} (user {built.user}), not {spec.env} with {spec.policy} "
                    f"(user {spec.user})"
                )
            return model
        try:
            model = await self._start_actors(spec)
        except BaseException as exc:
            with self._lock:
                self._starting = None
            starting.set_exception(exc)
            raise
        starting.set_result(model)
        return model

    async def _start_actors(self, spec: RolloutSpec) -> str:
        self._spec_json = spec.model_dump_json()
        self._join()
        self._worker_class = remote_worker(self.options.cpus_per_actor)
        count = actor_count(self.options)
        if self.options.slots is not None:
            self._slots = self.options.slots
        elif spec.concurrency is not None:
            self._slots = math.ceil(spec.concurrency / count)
        with self._lock:
            self._actors = [self._new_actor() for _ in range(count)]
            actors = list(self._actors)
        names = await self._all(a.handle.ready.remote() for a in actors)
        return str(names[0])

    def _join(self) -> None:
        if not self._joined:
            self._cluster.enter_context(ray_cluster(self.options.address))
            self._joined = True

    @staticmethod
    async def _all(refs: Iterable[Any]) -> list[Any]:
        try:
            return list(await asyncio.gather(*refs))
        except (RayActorError, RayTaskError) as exc:
            raise RolloutError(f"a Ray rollout actor failed: {_last_line(exc)}") from None

    def _new_actor(self) -> _Actor:
        actor = _Actor(self._worker_class.remote(self._spec_json))
        if self._weights is not None:
            actor.handle.set_weights.remote(*self._weights)
        return actor

    def publish(self, state: Mapping[str, Any], version: int) -> None:
        """Have every actor sample from ``state`` (a state dict) as weights ``version``: the
        episodes handed out from now on start with it (on an actor, once its sequences in
        flight end; one that fails to load it fails those episodes). Returns at once; an actor
        started later loads it first."""
        self._join()
        weights = (ray.put(dict(state)), version)
        with self._lock:
            self._weights = weights
            for actor in self._actors:
                actor.handle.set_weights.remote(*weights)

    def snapshot(self, name: str) -> Snapshot:
        """The weights published last, kept as ``name`` (a self-play pool's member): the same
        object in the store, which lives as long as the snapshot is referenced."""
        with self._lock:
            if self._weights is None:
                raise RolloutError(f"snapshot {name}: no weights have been published to the actors")
            return Snapshot(name, self._weights[0])

    def seated(self, seats: SeatPlan) -> EpisodeRunner:
        """A runner on these actors that plays each episode as a game of the env's seats as
        ``seats`` says; it shares the actors (closing it closes this runner)."""
        return _Seated(self, seats)

    def play(self, run: RolloutRun) -> AsyncGenerator[PlayedEpisode, None]:
        return self._dispatch(run)

    async def _dispatch(
        self, run: RolloutRun, seats: SeatPlan | None = None
    ) -> AsyncGenerator[PlayedEpisode, None]:
        queue = deque(run.todo)
        spec = ray.put(run.spec.model_dump_json())  # once per run, not once per episode
        running: dict[asyncio.Future[PlayedEpisode], tuple[_Actor, EpisodeKey, Any]] = {}
        # This run's episodes on each actor (runs sharing the actors have slots each).
        busy: dict[_Actor, int] = {}
        yielded: set[tuple[str, int]] = set()
        last_death = ""
        try:
            while queue or running:
                self._hand_out(spec, seats, queue, running, busy)
                if not running:
                    raise RolloutError(
                        f"every Ray rollout actor died ({self.replaced} replaced, "
                        f"{len(queue)} episodes left); last: {last_death}"
                    )
                finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for future in finished:
                    actor, key, _ = running.pop(future)
                    busy[actor] -= 1
                    try:
                        played = future.result()
                    except _LOST as exc:
                        queue.appendleft(key)
                        last_death = _last_line(exc)
                        self._replace(actor)
                        continue
                    except RayTaskError as exc:
                        raise RolloutError(
                            f"episode {key.store_key} failed on a Ray actor: {_last_line(exc)}"
                        ) from None
                    if key.store_key in yielded:
                        continue
                    yielded.add(key.store_key)
                    yield played
        finally:
            for _, _, ref in running.values():
                ray.cancel(ref)

    def _hand_out(
        self,
        spec: Any,
        seats: SeatPlan | None,
        queue: deque[EpisodeKey],
        running: dict[asyncio.Future[PlayedEpisode], tuple[_Actor, EpisodeKey, Any]],
        busy: dict[_Actor, int],
    ) -> None:
        """Fill every actor's free slots from the front of the queue, least busy first."""
        with self._lock:
            actors = list(self._actors)
        while queue:
            actor = min(actors, key=lambda a: busy.get(a, 0), default=None)
            if actor is None or busy.get(actor, 0) >= self._slots:
                return
            key = queue.popleft()
            version = self._weights[1] if self._weights is not None else None
            ref = actor.handle.play.remote(spec, key, version, seats)
            future: asyncio.Future[PlayedEpisode] = asyncio.wrap_future(ref.future())
            busy[actor] = busy.get(actor, 0) + 1
            running[future] = (actor, key, ref)

    def _replace(self, actor: _Actor) -> None:
        """Drop a dead actor (once) and start another in its place while restarts are left."""
        with self._lock:
            if actor not in self._actors:
                return
            self._actors.remove(actor)
            ray.kill(actor.handle, no_restart=True)
            if self._restarts_left > 0:
                self._restarts_left -= 1
                self.replaced += 1
                self._actors.append(self._new_actor())

    async def close(self) -> None:
        if not self.persistent:
            self.shutdown()

    def shutdown(self) -> None:
        """Stop the actors and leave what ``start`` joined (a local cluster stops with it)."""
        with self._lock:
            actors, self._actors = self._actors, []
            self._starting = None
        self._weights = None
        for actor in actors:
            ray.kill(actor.handle, no_restart=True)
        self._cluster.close()
        self._joined = False


class _Seated(EpisodeRunner):
    """``RayRunner.seated``: the runner's actors playing games as a ``SeatPlan`` says."""

    def __init__(self, runner: RayRunner, seats: SeatPlan) -> None:
        self._runner = runner
        self._seats = seats

    async def start(self, spec: RolloutSpec) -> str:
        return await self._runner.start(spec)

    def play(self, run: RolloutRun) -> AsyncGenerator[PlayedEpisode, None]:
        return self._runner._dispatch(run, self._seats)

    async def close(self) -> None:
        await self._runner.close()
