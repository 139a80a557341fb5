"""The rollout engine and its one entry point: a ``RolloutSpec`` in, trajectories out.

Every episode is its own coroutine. Generation requests from all live episodes reach the policy
at once, so a policy with dynamic batching (``HFPolicy``) fills its batches with whatever is
ready; tool calls run concurrently, so a slow tool stalls only its own episode.
``spec.lockstep`` runs the synchronous baseline instead (``trajforge.rollout.lockstep``). Either
way every task x sample asked for comes back.

``open_rollout`` is the one implementation: it resolves the spec's references (or takes the
live objects an in-process caller passes), plans the run and calls the hooks around it; the
store's hook writes finished trajectories as they end and makes a named run resume. Its
stream yields the trajectories as they finish; ``arun_rollout`` and ``run_rollout`` collect
them in task x sample order.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, aclosing, asynccontextmanager
from typing import NamedTuple, TypedDict, TypeVar, Unpack

from trajforge.envs import Env, EnvEntry, get_env
from trajforge.policy import Policy, load_policy
from trajforge.ram import start_memory_watchdog
from trajforge.rollout.episode import EnvFactory, Episode
from trajforge.rollout.episode_key import EpisodeKey
from trajforge.rollout.hooks import RolloutHook, RolloutRun, StoreHook
from trajforge.rollout.lockstep import run_lockstep
from trajforge.rollout.seeding import group_id_for
from trajforge.rollout.spec import RolloutError, RolloutSpec, TaskSample
from trajforge.schema import ExpertFn, Task, Trajectory
from trajforge.store import TrajectoryStore

Item = TypeVar("Item")
Played = TypeVar("Played")


class LiveParts(TypedDict, total=False):
    """What an in-process caller may hand the entry point beside the spec."""

    env: EnvFactory
    """Makes a fresh environment per episode, in place of ``spec.env``."""
    policy: Policy
    """An already-built policy, in place of ``spec.policy`` (RL samples from the model it
    trains); the caller keeps it open."""
    store: TrajectoryStore
    """An open store, in place of opening ``spec.store``."""
    runner: EpisodeRunner
    """Where the episodes are played (default: a ``LocalRunner`` in this process)."""
    hooks: Sequence[RolloutHook]
    """Called around the run, after the store's own hook."""
    user_policy: Policy
    """Plays the simulated user of an env that has one, in place of ``spec.user``; the
    caller keeps it open."""
    wrap_env: Callable[[Env], Env]
    """Wraps each fresh environment (a memory that adds to its opening messages)."""


class RolloutStream:
    """The trajectories of an open rollout as they finish (stored before they are yielded);
    the episodes a resumed run had already are not yielded again."""

    def __init__(
        self, run: RolloutRun, source: AsyncGenerator[Trajectory, None], store: StoreHook | None
    ) -> None:
        self.run = run
        self._source = source
        self._store = store

    def __aiter__(self) -> AsyncIterator[Trajectory]:
        return self._source

    async def collect(self) -> list[Trajectory]:
        """Run the episodes left; return one trajectory per task x sample in order, those a
        resumed run found in the store included."""
        by_key = {(t.task.id, t.sample_index or 0): t async for t in self}
        wanted = [k.store_key for k in self.run.keys]
        missing = set(wanted) - by_key.keys()
        if missing and self._store is not None:
            by_key.update(self._store.stored(self.run, missing))
        if len(by_key) < len(wanted):
            raise RolloutError(
                f"run {self.run.run_id!r}: {len(wanted) - len(by_key)} skipped episodes are in "
                "no store to read them back from"
            )
        return [by_key[key] for key in wanted]


async def as_they_finish(
    items: Sequence[Item], play: Callable[[Item], Awaitable[Played]], concurrency: int | None
) -> AsyncGenerator[Played, None]:
    """``play`` every item as its own task, at most ``concurrency`` at once (``None``: all);
    yield the results in the order they finish. What every runner plays its episodes with: a
    play that raises (a bug in the engine itself, as episodes isolate their own failures) raises
    here instead of hanging the run, and leaving early cancels the plays still running."""
    limiter = asyncio.Semaphore(concurrency or max(1, len(items)))

    async def bounded(item: Item) -> Played:
        async with limiter:
            return await play(item)

    tasks = [asyncio.create_task(bounded(item)) for item in items]
    try:
        for finished in asyncio.as_completed(tasks):
            yield await finished
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def new_episode(
    spec: RolloutSpec,
    key: EpisodeKey,
    make_env: EnvFactory,
    policy: Policy,
    user_policy: Policy | None = None,
) -> Episode:
    """Episode ``key`` of the run ``spec`` describes (its ``run_id`` filled in): the same
    episode whichever process runs it."""
    assert spec.run_id is not None, "a planned run's spec names its run"
    return Episode(
        key,
        env_factory=make_env,
        policy=policy,
        limits=spec.limits,
        sampling=spec.sampling.params(),
        run_id=spec.run_id,
        group_id=group_id_for(spec.run_id, key.task.id),
        seed=spec.seed,
        user_policy=user_policy,
        context=spec.context,
    )


class PlayedEpisode(NamedTuple):
    """An episode's trajectory and the ones recorded beside it (the simulated user's side)."""

    trajectory: Trajectory
    linked: list[Trajectory]


class EpisodeRunner(ABC):
    """Where a run's episodes are played: in this process (``LocalRunner``, the default) or
    elsewhere (Ray actors: ``trajforge.distributed``). The entry point around it keeps the
    run's bookkeeping (plan, resume, store, hooks) in the calling process."""

    @abstractmethod
    async def start(self, spec: RolloutSpec) -> str:
        """Get ready to play ``spec``'s episodes; return the name of the policy playing them."""

    @abstractmethod
    def play(self, run: RolloutRun) -> AsyncGenerator[PlayedEpisode, None]:
        """Play ``run.todo``; yield every episode exactly once, as it ends."""

    @abstractmethod
    async def close(self) -> None:
        """Release what ``start`` took (also called after ``start`` failed)."""


class LocalRunner(EpisodeRunner):
    """Every episode a coroutine of this process's event loop (or the lockstep baseline).

    Args:
        make_env: Makes a fresh environment per episode.
        policy: The policy, kept open by the caller (``None``: loaded from the spec by
            ``start``, with ``expert`` as the scripted expert, and closed by ``close``).
        expert: The environment's scripted expert, for the ``expert`` policy.
        user_policy: Plays the simulated user, kept open by the caller (``None``: chosen by
            ``start`` from ``spec.user`` and ``scripted_user``, see ``user_policy_for``).
        scripted_user: The environment's scripted user, if it has one.
    """

    def __init__(
        self,
        make_env: EnvFactory,
        policy: Policy | None,
        expert: ExpertFn | None = None,
        *,
        user_policy: Policy | None = None,
        scripted_user: ExpertFn | None = None,
    ) -> None:
        self._make_env = make_env
        self._policy = policy
        self._expert = expert
        self._user_policy = user_policy
        self._scripted_user = scripted_user
        self._owned: list[Policy] = []

    async def start(self, spec: RolloutSpec) -> str:
        if self._policy is None:
            if spec.policy is None:
                raise RolloutError("spec.policy: name the policy, or pass a live one")
            self._policy = spec.policy.load(expert=self._expert)
            self._owned.append(self._policy)
        if self._user_policy is None:
            self._user_policy = user_policy_for(spec, self._scripted_user, self._policy)
            if self._user_policy is not None and self._user_policy is not self._policy:
                self._owned.append(self._user_policy)
        return self._policy.name

    async def play(self, run: RolloutRun) -> AsyncGenerator[PlayedEpisode, None]:
        assert self._policy is not None, "start() loads the policy"
        spec = run.spec
        episodes = [
            new_episode(spec, key, self._make_env, self._policy, self._user_policy)
            for key in run.todo
        ]
        by_key = {ep.key.store_key: ep for ep in episodes}
        source = (
            run_lockstep(episodes, spec.concurrency)
            if spec.lockstep
            else as_they_finish(episodes, Episode.play, spec.concurrency)
        )
        async with aclosing(source) as finished:
            async for traj in finished:
                yield PlayedEpisode(traj, by_key[(traj.task.id, traj.sample_index or 0)].linked)

    async def close(self) -> None:
        owned, self._owned = self._owned, []
        for policy in reversed(owned):
            await policy.close()


async def _episodes(
    run: RolloutRun, runner: EpisodeRunner, hooks: Sequence[RolloutHook]
) -> AsyncGenerator[Trajectory, None]:
    async with aclosing(runner.play(run)) as finished:
        async for traj, linked in finished:
            run.stats.add(traj)
            for hook in hooks:
                for other in linked:
                    hook.on_linked_trajectory(run, other)
                hook.on_episode_end(run, traj)
            yield traj


def _env_factory(entry: EnvEntry | None, live: EnvFactory | None) -> EnvFactory:
    if live is not None and entry is not None:
        raise RolloutError("spec.env: the environment is passed live too; give it once")
    if live is not None:
        return live
    if entry is None:
        raise RolloutError("spec.env: name the environment, or pass a live env factory")
    return entry.make


def _wrapped(make: EnvFactory, wrap: Callable[[Env], Env] | None) -> EnvFactory:
    return make if wrap is None else lambda: wrap(make())


def _tasks(spec: RolloutSpec, entry: EnvEntry | None) -> list[Task]:
    if not isinstance(spec.tasks, TaskSample):
        return spec.tasks
    if entry is None:
        raise RolloutError(
            "spec.tasks: a task sample is drawn from spec.env; name it, or list the tasks"
        )
    sample = spec.tasks
    return entry.tasks(sample.count, seed=sample.seed, split=sample.split)


def user_policy_for(spec: RolloutSpec, script: ExpertFn | None, agent: Policy) -> Policy | None:
    """The simulated user's policy: ``spec.user`` (the agent's own object when both name the
    same policy; ``expert`` is the env's scripted user ``script``), else the env's scripted user
    when it has one, else none."""
    if spec.user is None:
        if script is None:
            return None
        return load_policy("expert", expert=script, name="scripted-user")
    if spec.user == spec.policy:
        return agent
    if spec.user.name == "expert" and script is None:
        raise RolloutError("spec.user: 'expert' is the env's scripted user; this env has none")
    return spec.user.load(expert=script)


@asynccontextmanager
async def open_rollout(
    spec: RolloutSpec, **live: Unpack[LiveParts]
) -> AsyncIterator[RolloutStream]:
    """Open the rollout ``spec`` asks for; iterate the stream to run its episodes.

    References are resolved here (the environment from the registry, the policy loaded, the
    store opened) unless ``live`` passes the object itself; what is opened here is closed on
    the way out. Hooks see the run start before the first episode and end on the way out
    (also after an error or Ctrl-C); leaving early cancels the episodes still running.
    """
    start_memory_watchdog()
    entry = get_env(spec.env) if spec.env is not None else None
    if entry is not None and entry.expert_refusal and spec.policy and spec.policy.name == "expert":
        raise RolloutError(entry.expert_refusal)
    tasks = _tasks(spec, entry)
    async with AsyncExitStack() as stack:
        runner = live.get("runner")
        if runner is None:
            policy = live.get("policy")
            if policy is not None and spec.policy is not None:
                raise RolloutError("spec.policy: the policy is passed live too; give it once")
            runner = LocalRunner(
                _wrapped(_env_factory(entry, live.get("env")), live.get("wrap_env")),
                policy,
                entry.expert if entry is not None else None,
                user_policy=live.get("user_policy"),
                scripted_user=entry.scripted_user if entry is not None else None,
            )
        elif {"env", "policy", "user_policy", "wrap_env"} & live.keys():
            raise RolloutError("a live env or policy runs in this process; not with a runner")
        stack.push_async_callback(runner.close)
        model = await runner.start(spec)
        store = live.get("store")
        if store is None and spec.store is not None:
            store = stack.enter_context(TrajectoryStore(spec.store))
        store_hook = StoreHook(store) if store is not None else None
        hooks: list[RolloutHook] = [store_hook] if store_hook is not None else []
        hooks.extend(live.get("hooks", ()))
        run = RolloutRun.plan(spec, tasks, model)
        started: list[RolloutHook] = []
        try:
            for hook in hooks:
                started.append(hook)
                hook.on_rollout_start(run)
            source = _episodes(run, runner, hooks)
            async with aclosing(source):
                yield RolloutStream(run, source, store_hook)
        finally:
            for hook in started:
                hook.on_rollout_end(run)


async def arun_rollout(spec: RolloutSpec, **live: Unpack[LiveParts]) -> list[Trajectory]:
    """Run ``spec``; return one trajectory per task x sample in order, including those a
    resumed run found in the store. ``live`` as ``open_rollout``."""
    async with open_rollout(spec, **live) as stream:
        return await stream.collect()


def run_rollout(spec: RolloutSpec, **live: Unpack[LiveParts]) -> list[Trajectory]:
    """``arun_rollout`` in its own event loop (from async code, await ``arun_rollout``)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(arun_rollout(spec, **live))
    raise RolloutError(
        "run_rollout() cannot run inside a running event loop; await arun_rollout() instead"
    )
