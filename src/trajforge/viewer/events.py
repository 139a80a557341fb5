"""Server-sent events for a run still being written: each new trajectory's summary row.

Each event carries the row's store rowid as its ``id``, so a browser's ``EventSource`` that
reconnects (it does after every stream ends) resumes from ``Last-Event-ID`` without gaps or
repeats. A stream ends after ``max_s`` seconds, which bounds what a forgotten tab holds open.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from anyio import to_thread

from trajforge.store import TrajectoryFilter
from trajforge.viewer.service import ViewerData

POLL_S = 0.5
KEEPALIVE_S = 15.0
RETRY_MS = 1000


def event_text(row: dict[str, Any]) -> str:
    return f"id: {row['rowid']}\nevent: trajectory\ndata: {json.dumps(row, default=str)}\n\n"


async def trajectory_events(
    data: ViewerData,
    where: TrajectoryFilter,
    after: int,
    max_s: float,
    disconnected: Callable[[], Awaitable[bool]],
) -> AsyncIterator[str]:
    """The SSE stream of rows matching ``where`` stored after cursor ``after``."""
    deadline = time.monotonic() + max_s
    last_sent = time.monotonic()
    cursor = after
    yield f"retry: {RETRY_MS}\n\n"
    while time.monotonic() < deadline and not await disconnected():
        rows = await to_thread.run_sync(data.new_rows, where, cursor)
        for row in rows:
            cursor = row["rowid"]
            yield event_text(row)
        if rows:
            last_sent = time.monotonic()
            continue
        if time.monotonic() - last_sent > KEEPALIVE_S:
            yield ": keep-alive\n\n"
            last_sent = time.monotonic()
        await asyncio.sleep(min(POLL_S, max(deadline - time.monotonic(), 0.0)))
