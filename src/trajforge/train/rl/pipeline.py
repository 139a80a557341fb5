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
``async_staleness`` steps' threads, which run while a step trains.
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


class RolloutThread:
    """One step's rollouts, sampled on a thread of their own.

    Args:
        rollout: The step's episodes as a coroutine, given the hooks to run them with.
        step: The step they are for (named by a stall).
        revisited: How many of the step's tasks are revisits.
        name: The thread's name.
    """

    def __init__(self, rollout: StepCoroutine, step: int, revisited: int, name: str) -> None:
        self.step = step
        self.revisited = revisited
        self.progress = Progress()
        self._rollout = rollout
        self._done: concurrent.futures.Future[list[Trajectory]] = concurrent.futures.Future()
        self._started = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[list[Trajectory]] | None = None
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
        return await self._rollout([self.progress])

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def result(self, stall_s: float) -> list[Trajectory]:
        """The step's trajectories once all have ended; ``RolloutStalled`` when none ended for
        ``stall_s`` seconds (the rollouts go on until cancelled)."""
        while True:
            idle = time.monotonic() - self.progress.last
            try:
                return self._done.result(timeout=max(stall_s - idle, 0.0))
            except TimeoutError:
                idle = time.monotonic() - self.progress.last
                if idle >= stall_s:
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
        ``ahead_steps`` steps' are under way before this one trains (sampled from weights at
        most that many updates old, their later turns from newer ones)."""
        ahead = self.ahead.popleft() if self.ahead else None
        tasks, revisited = next_tasks() if ahead is None else ([], ahead.revisited)
        last = step + len(self.ahead)
        while len(self.ahead) < self.ahead_steps and last < self.total_steps:
            last += 1
            self.ahead.append(self._start(last, *next_tasks(), "trajforge-rollout-ahead"))
        if ahead is None:
            return self.rollout(step, tasks), revisited
        return self._wait(ahead), revisited

    def rollout(self, step: int, tasks: list[Task], round_: int = 0) -> list[Trajectory]:
        """Step ``step``'s groups on ``tasks``, sampled now and waited for."""
        return self._wait(self._start(step, tasks, 0, "trajforge-rollout", round_))

    def _start(
        self, step: int, tasks: list[Task], revisited: int, name: str, round_: int = 0
    ) -> RolloutThread:
        def rollout(hooks: Sequence[RolloutHook]) -> Coroutine[Any, Any, list[Trajectory]]:
            return self._episodes(step, tasks, round_, hooks)

        return RolloutThread(rollout, step, revisited, name)

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
