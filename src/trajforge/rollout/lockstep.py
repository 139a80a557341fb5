"""The lockstep baseline: the episodes of a batch advance turn by turn together.

This is how a synchronous rollout works: every live episode's generation is requested at once
(the policy batches them), and the next turn starts only when every episode's tools for this
turn have returned. It drives the very same ``Episode`` phases as the asynchronous engine, so
the two modes differ only in scheduling and their wall times compare honestly.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence

from trajforge.rollout.episode import Episode
from trajforge.schema import Trajectory


async def run_lockstep(
    episodes: Sequence[Episode], batch_size: int | None = None
) -> AsyncGenerator[Trajectory, None]:
    """Run ``episodes`` in lockstep batches of ``batch_size`` (all at once when None).

    Yields each trajectory at the end of the turn in which its episode ended.
    """
    size = batch_size or max(1, len(episodes))
    for first in range(0, len(episodes), size):
        batch = list(episodes[first : first + size])
        try:
            await asyncio.gather(*(ep.start() for ep in batch))
            live = batch
            while live:
                await asyncio.gather(*(ep.generate() for ep in live if ep.live))
                await asyncio.gather(*(ep.act() for ep in live if ep.live))
                ended = [ep for ep in live if not ep.live]
                for traj in await asyncio.gather(*(ep.finish() for ep in ended)):
                    yield traj
                live = [ep for ep in live if ep.live]
        except (asyncio.CancelledError, GeneratorExit):
            await asyncio.shield(asyncio.gather(*(ep.abort() for ep in batch)))
            raise
