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
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psutil
from playwright.sync_api import Browser, Playwright, sync_playwright

from trajforge.envs.browser.chromium import (
    START_TIMEOUT_S,
    Chromium,
    first_line,
    launch,
    reap_leftovers,
)
from trajforge.errors import InfraError

T = TypeVar("T")

DEFAULT_SIZE = 2
DEFAULT_CALL_TIMEOUT_S = 30.0
# A start is Chromium's own (``START_TIMEOUT_S``) plus Playwright's connect: on a loaded machine
# the first one of a run can take far longer than any call.
LAUNCH_TIMEOUT_S = START_TIMEOUT_S * 3
DEFAULT_RECYCLE_AFTER = 200
ACQUIRE_POLL_S = 0.02
STOP_WAIT_S = 10.0

Work = Callable[[Browser], Any]


class BrowserFailedError(InfraError):
    """The browser crashed or stopped answering; the episode it served is lost."""


@dataclass
class _Call:
    """Work queued on a slot: ``started`` resolves once its browser is up, ``done`` with the
    work's result, so a slow start does not eat the work's own time."""

    work: Work
    started: concurrent.futures.Future[None] = field(default_factory=concurrent.futures.Future)
    done: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)


class BrowserSlot:
    """One Chromium and the thread that drives it."""

    def __init__(self, index: int, recycle_after: int) -> None:
        self.index = index
        self.recycle_after = recycle_after
        self.episodes = 0
        self.launches = 0
        self.chromium: Chromium | None = None
        self._browser: Browser | None = None
        self._calls: queue.Queue[_Call | None] = queue.Queue()
        self._thread = threading.Thread(
            target=self._serve, name=f"trajforge-browser-{index}", daemon=True
        )
        self._thread.start()

    def _serve(self) -> None:
        with sync_playwright() as playwright:
            while (call := self._calls.get()) is not None:
                if not call.done.set_running_or_notify_cancel():
                    continue
                try:
                    browser = self._ensure(playwright)
                    call.started.set_result(None)
                    call.done.set_result(call.work(browser))
                except BaseException as exc:
                    if not call.started.done():
                        call.started.set_exception(exc)
                    call.done.set_exception(exc)
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
        return self._submit(work).done

    def _submit(self, work: Work) -> _Call:
        call = _Call(work)
        # Running from the start: a caller that stops waiting for it cannot cancel it under the
        # slot's thread.
        call.started.set_running_or_notify_cancel()
        self._calls.put(call)
        return call

    def _timed_out(self, timeout_s: float, starting: bool) -> BrowserFailedError:
        self.kill()
        what = "did not start" if starting else "no answer"
        return BrowserFailedError(
            f"browser {self.index}: {what} within {timeout_s:g}s; it was killed"
        )

    async def run(self, work: Callable[[Browser], T], timeout_s: float) -> T:
        """``work(browser)`` on the slot's thread, awaited from any asyncio loop; ``timeout_s``
        counts from the moment the browser is up (a start has ``LAUNCH_TIMEOUT_S`` of its own).

        Raises:
            BrowserFailedError: it overran its time (the browser is killed and replaced) or the
                browser died under it.
        """
        call = self._submit(work)
        try:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.wrap_future(call.started), LAUNCH_TIMEOUT_S)
            if not call.started.done():
                raise self._timed_out(LAUNCH_TIMEOUT_S, starting=True)
            result: T = await asyncio.wait_for(asyncio.wrap_future(call.done), timeout_s)
        except TimeoutError:
            raise self._timed_out(timeout_s, starting=False) from None
        except BrowserFailedError:
            raise
        except Exception as exc:
            if self.chromium is None or not self.chromium.alive():
                raise BrowserFailedError(f"browser {self.index} died: {first_line(exc)}") from exc
            raise
        return result

    def call(self, work: Callable[[Browser], T], timeout_s: float) -> T:
        """``run`` for synchronous callers."""
        call = self._submit(work)
        with contextlib.suppress(Exception):
            call.started.result(LAUNCH_TIMEOUT_S)
        if not call.started.done():
            raise self._timed_out(LAUNCH_TIMEOUT_S, starting=True)
        try:
            result: T = call.done.result(timeout_s)
        except concurrent.futures.TimeoutError:
            raise self._timed_out(timeout_s, starting=False) from None
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
