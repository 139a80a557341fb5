"""``RayRunner``: a rollout's episodes played on Ray actors, handed out as slots free up.

The driver keeps a queue of the episodes still to play. Each actor holds at most ``slots`` of
them at a time; when one comes back, the next episode goes to the actor that returned it, so
fast actors take more and a slow one never holds the run. An actor that dies (killed,
preempted, out of memory) takes none of the run with it: its unfinished episodes go back to the
front of the queue and it is replaced, up to ``max_restarts`` times over the run. Every
episode is yielded once, however often it was played.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import AsyncGenerator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import ObjectLostError, RayActorError, RayTaskError

from trajforge.distributed.cluster import actor_count, ray_cluster
from trajforge.distributed.options import RayOptions
from trajforge.distributed.worker import remote_worker
from trajforge.rollout import EpisodeKey, EpisodeRunner, RolloutError, RolloutRun, RolloutSpec
from trajforge.schema import Trajectory

DEFAULT_SLOTS = 8
"""Episodes an actor plays at once when neither the options nor the spec say."""

# What an actor's death looks like from the driver: its calls fail, or their results vanish.
_LOST = (RayActorError, ObjectLostError)


@dataclass(eq=False)
class _Actor:
    handle: Any
    busy: int = 0


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
    """

    def __init__(self, options: RayOptions | None = None) -> None:
        self.options = options or RayOptions()
        self._actors: list[_Actor] = []
        self._spec_json = ""
        self._slots = DEFAULT_SLOTS
        self._restarts_left = self.options.max_restarts
        self._worker_class: Any = None
        self._cluster = ExitStack()
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
        self._cluster.enter_context(ray_cluster(self.options.address))
        self._spec_json = spec.model_dump_json()
        self._worker_class = remote_worker(self.options.cpus_per_actor)
        count = actor_count(self.options)
        if self.options.slots is not None:
            self._slots = self.options.slots
        elif spec.concurrency is not None:
            self._slots = math.ceil(spec.concurrency / count)
        self._actors = [self._new_actor() for _ in range(count)]
        try:
            names = await asyncio.gather(*(a.handle.ready.remote() for a in self._actors))
        except (RayActorError, RayTaskError) as exc:
            raise RolloutError(f"a Ray rollout actor failed to start: {_last_line(exc)}") from None
        return str(names[0])

    def _new_actor(self) -> _Actor:
        return _Actor(self._worker_class.remote(self._spec_json))

    def play(self, run: RolloutRun) -> AsyncGenerator[Trajectory, None]:
        return self._dispatch(run)

    async def _dispatch(self, run: RolloutRun) -> AsyncGenerator[Trajectory, None]:
        queue = deque(run.todo)
        running: dict[asyncio.Future[Trajectory], tuple[_Actor, EpisodeKey, Any]] = {}
        yielded: set[tuple[str, int]] = set()
        last_death = ""
        try:
            while queue or running:
                self._hand_out(run.run_id, queue, running)
                if not running:
                    raise RolloutError(
                        f"every Ray rollout actor died ({self.replaced} replaced, "
                        f"{len(queue)} episodes left); last: {last_death}"
                    )
                finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for future in finished:
                    actor, key, _ = running.pop(future)
                    actor.busy -= 1
                    try:
                        trajectory = future.result()
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
                    yield trajectory
        finally:
            for _, _, ref in running.values():
                ray.cancel(ref)

    def _hand_out(
        self,
        run_id: str,
        queue: deque[EpisodeKey],
        running: dict[asyncio.Future[Trajectory], tuple[_Actor, EpisodeKey, Any]],
    ) -> None:
        """Fill every actor's free slots from the front of the queue, least busy first."""
        while queue:
            actor = min(self._actors, key=lambda a: a.busy, default=None)
            if actor is None or actor.busy >= self._slots:
                return
            key = queue.popleft()
            ref = actor.handle.play.remote(run_id, key)
            future: asyncio.Future[Trajectory] = asyncio.wrap_future(ref.future())
            actor.busy += 1
            running[future] = (actor, key, ref)

    def _replace(self, actor: _Actor) -> None:
        """Drop a dead actor (once) and start another in its place while restarts are left."""
        if actor not in self._actors:
            return
        self._actors.remove(actor)
        ray.kill(actor.handle, no_restart=True)
        if self._restarts_left > 0:
            self._restarts_left -= 1
            self.replaced += 1
            self._actors.append(self._new_actor())

    async def close(self) -> None:
        actors, self._actors = self._actors, []
        for actor in actors:
            ray.kill(actor.handle, no_restart=True)
        self._cluster.close()
