"""A pool of headless Chromiums reused across episodes, one per slot, each driven by a thread
of its own (Playwright's sync API stays on the thread that started it).

An episode leases a slot (``acquire``), works in a fresh browser context through ``slot.run``
(any asyncio loop may await it; the work runs on the slot's thread) and gives it back
(``release``). A call that overruns its time kills the slot's browser, so the blocked call fails
and only that episode is lost; a slot whose browser died starts a fresh one on its next call.
Browsers are also replaced every ``recycle_after`` episodes, so a long run's memory stays flat.

``shared_pool()`` is the process's pool (a Ray actor is a process: each gets its own). It is
closed at interpreter exit (Ctrl-C included); a SIGKILLed run's browsers die with it (see
``chromium``) and their folders are reaped when the next pool starts.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psutil
from playwright.sync_api import Browser, Playwright, sync_playwright

from trajforge.envs.browser.chromium import Chromium, first_line, launch, reap_leftovers
from trajforge.errors import InfraError

T = TypeVar("T")

DEFAULT_SIZE = 2
DEFAULT_CALL_TIMEOUT_S = 30.0
DEFAULT_RECYCLE_AFTER = 200
ACQUIRE_POLL_S = 0.02
STOP_WAIT_S = 10.0

Work = Callable[[Browser], Any]


class BrowserFailedError(InfraError):
    """The browser crashed or stopped answering; the episode it served is lost."""


class BrowserSlot:
    """One Chromium and the thread that drives it."""

    def __init__(self, index: int, recycle_after: int) -> None:
        self.index = index
        self.recycle_after = recycle_after
        self.episodes = 0
        self.launches = 0
        self.chromium: Chromium | None = None
        self._browser: Browser | None = None
        self._calls: queue.Queue[tuple[Work, concurrent.futures.Future[Any]] | None] = queue.Queue()
        self._thread = threading.Thread(
            target=self._serve, name=f"trajforge-browser-{index}", daemon=True
        )
        self._thread.start()

    def _serve(self) -> None:
        with sync_playwright() as playwright:
            while (call := self._calls.get()) is not None:
                work, future = call
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    future.set_result(work(self._ensure(playwright)))
                except BaseException as exc:
                    future.set_exception(exc)
                    if not self._healthy():
                        self._drop()
            self._drop()

    def _healthy(self) -> bool:
        return (
            self._browser is not None
            and self._browser.is_connected()
            and self.chromium is not None
            and self.chromium.alive()
        )

    def _ensure(self, playwright: Playwright) -> Browser:
        if not self._healthy():
            self._drop()
            self.chromium = launch()
            self.launches += 1
            self._browser = playwright.chromium.connect_over_cdp(self.chromium.ws_url)
        assert self._browser is not None
        return self._browser

    def _drop(self) -> None:
        chromium, browser = self.chromium, self._browser
        self.chromium, self._browser = None, None
        if chromium is not None:
            chromium.remove()
        if browser is not None:
            with contextlib.suppress(Exception):
                browser.close()

    def submit(self, work: Work) -> concurrent.futures.Future[Any]:
        """Queue ``work(browser)`` on the slot's thread."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._calls.put((work, future))
        return future

    async def run(self, work: Callable[[Browser], T], timeout_s: float) -> T:
        """``work(browser)`` on the slot's thread, awaited from any asyncio loop.

        Raises:
            BrowserFailedError: it overran ``timeout_s`` (the browser is killed and replaced)
                or the browser died under it.
        """
        future = self.submit(work)
        try:
            result: T = await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
        except TimeoutError:
            self.kill()
            raise BrowserFailedError(
                f"browser {self.index}: no answer within {timeout_s:g}s; it was killed"
            ) from None
        except Exception as exc:
            if self.chromium is None or not self.chromium.alive():
                raise BrowserFailedError(f"browser {self.index} died: {first_line(exc)}") from exc
            raise
        return result

    def call(self, work: Callable[[Browser], T], timeout_s: float) -> T:
        """``run`` for synchronous callers."""
        future = self.submit(work)
        try:
            result: T = future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            self.kill()
            raise BrowserFailedError(
                f"browser {self.index}: no answer within {timeout_s:g}s; it was killed"
            ) from None
        return result

    def begin_episode(self) -> None:
        """Count an episode; past ``recycle_after`` the next call gets a fresh browser."""
        self.episodes += 1
        if self.episodes % self.recycle_after == 0:
            self.kill()

    def kill(self) -> None:
        """SIGKILL the browser (from any thread); the slot replaces it on its next call."""
        chromium = self.chromium
        if chromium is not None:
            chromium.kill()

    def pids(self) -> list[int]:
        """The browser's process and its children (renderers, zygotes)."""
        chromium = self.chromium
        return [] if chromium is None else _tree(chromium.pid)

    def stop(self) -> None:
        """End the thread and the browser; a thread stuck in a call is cut off by the kill."""
        self._calls.put(None)
        self._thread.join(STOP_WAIT_S)
        if self._thread.is_alive():
            chromium = self.chromium
            if chromium is not None:
                chromium.remove()
            self._thread.join(STOP_WAIT_S)


def _tree(pid: int) -> list[int]:
    try:
        root = psutil.Process(pid)
        return [pid, *(child.pid for child in root.children(recursive=True))]
    except psutil.Error:
        return []


class BrowserPool:
    """``size`` browser slots leased to one episode at a time."""

    def __init__(
        self,
        size: int = DEFAULT_SIZE,
        *,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        recycle_after: int = DEFAULT_RECYCLE_AFTER,
    ) -> None:
        if size < 1:
            raise ValueError(f"browser pool: size must be at least 1, got {size}")
        reap_leftovers()
        self.call_timeout_s = call_timeout_s
        self.owner_pid = os.getpid()
        self.slots = [BrowserSlot(i, recycle_after) for i in range(size)]
        self._free: queue.Queue[BrowserSlot] = queue.Queue()
        for slot in self.slots:
            self._free.put(slot)
        self._closed = False
        atexit.register(self.close)

    async def acquire(self, timeout_s: float | None = None) -> BrowserSlot:
        """A free slot, waiting (without blocking the loop) while all are leased; by default
        as long as the pool is open: an eval queues far more episodes than the pool has
        browsers, and every leased slot comes back (a browser that hangs past its call timeout
        is killed), so a wait is no failure of the episode.

        Raises:
            BrowserFailedError: the pool is closed, or none came free within ``timeout_s``.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._closed:
            with contextlib.suppress(queue.Empty):
                slot = self._free.get_nowait()
                slot.begin_episode()
                return slot
            if deadline is not None and time.monotonic() > deadline:
                raise BrowserFailedError(f"no browser came free within {timeout_s:g}s")
            await asyncio.sleep(ACQUIRE_POLL_S)
        raise BrowserFailedError("the browser pool is closed")

    def release(self, slot: BrowserSlot) -> None:
        """Give a slot back (its episode's context must be closed)."""
        self._free.put(slot)

    def pids(self) -> list[int]:
        """Every process of the pool's browsers."""
        return [pid for slot in self.slots for pid in slot.pids()]

    def close(self) -> None:
        """Stop every browser and its thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for slot in self.slots:
            slot.stop()
        atexit.unregister(self.close)


_shared: BrowserPool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> BrowserPool:
    """This process's pool, started on first use; ``TRAJFORGE_BROWSERS`` sets its size."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared._closed or _shared.owner_pid != os.getpid():
            size = int(os.environ.get("TRAJFORGE_BROWSERS", DEFAULT_SIZE))
            _shared = BrowserPool(size)
        return _shared
