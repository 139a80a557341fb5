"""An RL step's rollouts on a thread of their own: watched for progress, cancellable, never a
hang.

Every step's episodes are sampled by a ``RolloutThread``: its own thread and event loop running
the ``StepRunner``'s coroutine. The trainer waits for a step's episodes with ``result``, which
stops the run with ``RolloutStalled`` (naming the step and the limit) once ``rollout_stall_s``
seconds pass without an episode of it ending: a generator that stalls or a worker that hangs
(alive but silent) ends the run instead of holding it. A worker that dies ends its episodes
with an error (or, on Ray, is replaced), so its failure reaches ``result`` as any rollout's
does. However the run ends (an error in a step, a stall, Ctrl-C), ``cancel`` cancels the
rollouts still under way, their episodes release their environments, and the thread ends
within ``CANCEL_GRACE_S``.

``StepRollouts`` keeps a run's: the one a step waits for and, in the asynchronous mode, the next
``async_staleness`` steps' threads, which run while a step trains. A step's rollouts ahead begin
when the step before it has all its episodes: a generator samples one step at a time, as the
trainer consumes them, so the staleness bound is a limit reached only when training is slower
than sampling. (Begun together, every step ahead sampled from the oldest weights and slowed the
step the trainer waits for: on the calculator job three steps out of four came from the SFT
weights.)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from trajforge.errors import EpisodeError
from trajforge.rollout import RolloutHook, RolloutRun
from trajforge.schema import Task, Trajectory

CANCEL_GRACE_S = 30.0
"""Seconds a cancelled step's rollouts get to release their environments and end."""

StepCoroutine = Callable[[Sequence[RolloutHook]], Coroutine[Any, Any, list[Trajectory]]]
"""``rollout(hooks)``: a step's episodes, ``hooks`` seeing the run."""


class RolloutStalled(EpisodeError):
    """No episode of a step's rollouts ended within ``rollout_stall_s``."""


class Progress(RolloutHook):
    """When an episode of the run last ended (when the run started, before any did)."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.ended = 0

    def on_episode_end(self, run: RolloutRun, trajectory: Trajectory) -> None:
        self.last = time.monotonic()
        self.ended += 1


def _seen(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class RolloutThread:
    """One step's rollouts, sampled on a thread of their own.

    Args:
        rollout: The step's episodes as a coroutine, given the hooks to run them with.
        step: The step they are for (named by a stall).
        revisited: How many of the step's tasks are revisits.
        after: Rollouts to let end first (the step before, for a step sampled ahead): these
            begin once they have, however they ended.
    """

    def __init__(
        self, rollout: StepCoroutine, step: int, revisited: int, after: RolloutThread | None = None
    ) -> None:
        self.step = step
        self.revisited = revisited
        self.progress = Progress()
        self._rollout = rollout
        self._after = after
        self._done: concurrent.futures.Future[list[Trajectory]] = concurrent.futures.Future()
        self._started = threading.Event()
        self._begun = threading.Event()  # its rollouts under way (past ``after``)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[list[Trajectory]] | None = None
        name = "trajforge-rollout" if after is None else "trajforge-rollout-ahead"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with asyncio.Runner() as runner:
                self._done.set_result(runner.run(self._main()))
        except BaseException as exc:  # re-raised in the training thread
            self._done.set_exception(exc)
        finally:
            self._started.set()  # a rollout that failed before it began

    async def _main(self) -> list[Trajectory]:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._started.set()
        if self._after is not None:
            before = asyncio.wrap_future(self._after._done)
            # How it ended is the trainer's to see, from its own result: marked seen here, or
            # asyncio logs it as never retrieved (also when this wait is cancelled).
            before.add_done_callback(_seen)
            await asyncio.wait([before])
            self._after = None  # its trajectories are the trainer's, not this thread's
        self.progress.last = time.monotonic()  # a stall counts from the rollouts' start
        self._begun.set()
        return await self._rollout([self.progress])

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def result(self, stall_s: float) -> list[Trajectory]:
        """The step's trajectories once all have ended; ``RolloutStalled`` when none ended for
        ``stall_s`` seconds (the rollouts go on until cancelled)."""
        while True:
            # Rollouts still queued behind the step before (which has ended when this one is
            # taken: they begin at once) have not yet been idle.
            idle = time.monotonic() - self.progress.last if self._begun.is_set() else 0.0
            try:
                return self._done.result(timeout=max(stall_s - idle, 0.0))
            except TimeoutError:
                idle = time.monotonic() - self.progress.last
                if self._begun.is_set() and idle >= stall_s:
                    raise RolloutStalled(
                        f"rl step {self.step}: no episode of its rollouts ended in {stall_s:g} s "
                        f"({self.progress.ended} had); the generator or a rollout worker is "
                        "stalled (rollout_stall_s)"
                    ) from None

    def cancel(self, grace_s: float = CANCEL_GRACE_S) -> bool:
        """Cancel the rollouts still under way and wait up to ``grace_s`` seconds for the
        thread to end; whether it did."""
        self._started.wait(grace_s)
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            # A loop already closed had ended its rollouts.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(task.cancel)
        self._thread.join(grace_s)
        return not self._thread.is_alive()


StepEpisodes = Callable[
    [int, list[Task], int, Sequence[RolloutHook]], Coroutine[Any, Any, list[Trajectory]]
]
"""``episodes(step, tasks, round_, hooks)``: a step's groups on ``tasks`` as the runner plays
them (``round_``: the refill round, or ``RESAMPLE_ROUND``)."""

NextTasks = Callable[[], tuple[list[Task], int]]
"""The next step's tasks and how many of them are revisits."""


class StepRollouts:
    """The steps' rollouts, each on a ``RolloutThread``: the one a step waits for and, in the
    asynchronous mode, the next ``ahead_steps`` steps' sampled while it trains.

    Args:
        episodes: Plays a step's groups.
        ahead_steps: Steps sampled ahead (``async_staleness``).
        total_steps: The run's last step (nothing is sampled beyond it).
        stall_s: ``rollout_stall_s``.
    """

    def __init__(
        self, episodes: StepEpisodes, *, ahead_steps: int, total_steps: int, stall_s: float
    ) -> None:
        self._episodes = episodes
        self.ahead_steps = ahead_steps
        self.total_steps = total_steps
        self.stall_s = stall_s
        self.ahead: deque[RolloutThread] = deque()
        """The next steps' rollouts under way, oldest first."""
        self.waiting: RolloutThread | None = None

    def take(self, step: int, next_tasks: NextTasks) -> tuple[list[Trajectory], int]:
        """Step ``step``'s trajectories and how many of its tasks were revisits: sampled now,
        or, in the asynchronous mode, those sampled while earlier steps trained; the next
        ``ahead_steps`` steps' are queued before this one trains, each to begin when the step
        before it has its episodes (sampled from weights at most that many updates old, their
        later turns from newer ones)."""
        current = self.ahead.popleft() if self.ahead else None
        if current is None:
            current = self._start(step, *next_tasks())
        last = self.ahead[-1] if self.ahead else current
        while len(self.ahead) < self.ahead_steps and last.step < self.total_steps:
            last = self._start(last.step + 1, *next_tasks(), after=last)
            self.ahead.append(last)
        return self._wait(current), current.revisited

    def rollout(self, step: int, tasks: list[Task], round_: int = 0) -> list[Trajectory]:
        """Step ``step``'s groups on ``tasks``, sampled now and waited for."""
        return self._wait(self._start(step, tasks, 0, round_=round_))

    def _start(
        self,
        step: int,
        tasks: list[Task],
        revisited: int,
        *,
        after: RolloutThread | None = None,
        round_: int = 0,
    ) -> RolloutThread:
        def rollout(hooks: Sequence[RolloutHook]) -> Coroutine[Any, Any, list[Trajectory]]:
            return self._episodes(step, tasks, round_, hooks)

        return RolloutThread(rollout, step, revisited, after)

    def _wait(self, rollout: RolloutThread) -> list[Trajectory]:
        self.waiting = rollout
        trajs = rollout.result(self.stall_s)
        self.waiting = None
        return trajs

    def cancel(self) -> list[int]:
        """Cancel every rollout under way; the steps whose threads did not end in time."""
        pending = [*self.ahead, *([self.waiting] if self.waiting is not None else [])]
        self.ahead.clear()
        self.waiting = None
        return [r.step for r in pending if not r.cancel()]
