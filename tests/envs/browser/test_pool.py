"""Browser pool hygiene: a crashed or hung browser fails only its episode and is replaced; a
run killed with SIGKILL leaves no browser behind, and the next pool reaps its folder."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from trajforge.envs.browser import BrowserEnv, BrowserFailedError, BrowserPool, MiniWoB
from trajforge.envs.browser import pool as pool_module
from trajforge.envs.browser.chromium import PID_FILE, Chromium, launch, reap_leftovers, run_root
from trajforge.schema import Task

from .helpers import calls, element

pytestmark = pytest.mark.slow

TASK = Task(id="click-test/1", prompt="click-test", data={"task": "click-test", "seed": 1})


def _button(text: str) -> str:
    return element(text.partition("\n\nPage:\n")[2], "button", "Click Me!")


async def test_a_killed_browser_fails_its_episode_only_and_the_pool_recovers(
    pool: BrowserPool,
) -> None:
    bench = MiniWoB(("click-test",))
    doomed, bystander = BrowserEnv(bench, pool=pool), BrowserEnv(bench, pool=pool)
    await doomed.reset(TASK)
    opening = await bystander.reset(TASK)
    assert doomed._slot is not bystander._slot
    doomed_slot = doomed._slot
    assert doomed_slot is not None
    killed = doomed_slot.pids()
    doomed_slot.kill()
    with pytest.raises(BrowserFailedError, match="died"):
        await doomed.step(calls(("click", {"element": "1"})))
    await doomed.close()
    assert killed and _running(killed) == []
    result = await bystander.step(calls(("click", {"element": _button(opening[-1].text)})))
    await bystander.close()
    assert (result.done, result.reward) == (True, 1.0)
    # The slot starts a fresh browser for its next episode.
    for _ in range(len(pool.slots)):
        again = BrowserEnv(bench, pool=pool)
        opening = await again.reset(TASK)
        result = await again.step(calls(("click", {"element": _button(opening[-1].text)})))
        await again.close()
        assert result.reward == 1.0


async def test_a_hung_browser_is_killed_after_the_call_timeout(pool: BrowserPool) -> None:
    env = BrowserEnv(MiniWoB(("click-test",)), pool=pool)
    await env.reset(TASK)
    slot, session = env._slot, env._session
    assert slot is not None and session is not None
    started = time.monotonic()
    with pytest.raises(BrowserFailedError, match="no answer within 2s"):
        await slot.run(lambda _: session.page.evaluate("() => { while (true) {} }"), 2.0)
    assert time.monotonic() - started < 10
    await env.close()
    again = BrowserEnv(MiniWoB(("click-test",)), pool=pool)
    opening = await again.reset(TASK)
    result = await again.step(calls(("click", {"element": _button(opening[-1].text)})))
    await again.close()
    assert result.reward == 1.0


def test_a_slow_start_does_not_eat_the_calls_time(monkeypatch: pytest.MonkeyPatch) -> None:
    def slow_launch() -> Chromium:
        time.sleep(1.5)
        return launch()

    monkeypatch.setattr(pool_module, "launch", slow_launch)
    slots = BrowserPool(1)
    try:
        assert slots.slots[0].call(lambda browser: browser.is_connected(), 1.0) is True
        monkeypatch.setattr(pool_module, "LAUNCH_TIMEOUT_S", 0.5)
        slots.slots[0].kill()
        with pytest.raises(BrowserFailedError, match=r"did not start within 0\.5s"):
            slots.slots[0].call(lambda browser: browser.is_connected(), 1.0)
    finally:
        slots.close()


_RUN = textwrap.dedent(
    """
    import asyncio
    import psutil
    from trajforge.envs.browser import BrowserEnv, BrowserPool, MiniWoB
    from trajforge.schema import Task

    async def main():
        env = BrowserEnv(MiniWoB(("click-test",)), pool=BrowserPool(1))
        await env.reset(Task(id="t", prompt="t", data={"task": "click-test", "seed": 1}))
        # Every process the run started: the Playwright driver, Chromium and its renderers.
        pids = [p.pid for p in psutil.Process().children(recursive=True)]
        print(env._slot.chromium.folder, *pids, flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


def _running(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            continue
    return alive


def _killed_run(signum: int) -> tuple[Path, list[int]]:
    """Start a run holding a browser, send it ``signum``; its folder and every process it had
    started."""
    run = subprocess.Popen(
        [sys.executable, "-c", _RUN], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    try:
        assert run.stdout is not None
        folder, *pids = run.stdout.readline().split()
        assert pids and (Path(folder) / PID_FILE).is_file()
    finally:
        run.send_signal(signum)
        # Generous: on a loaded machine closing the browsers and the Playwright driver took
        # over 30 s; what is checked is that nothing is left, not how fast.
        run.wait(120)
    started = [int(pid) for pid in pids]
    deadline = time.monotonic() + 10
    while _running(started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _running(started) == []
    return Path(folder), started


def test_a_sigkilled_run_leaves_no_process_and_the_next_start_reaps_its_folder() -> None:
    folder, _ = _killed_run(signal.SIGKILL)
    assert folder.parent == run_root() and folder.exists()
    assert reap_leftovers() >= 1
    assert not folder.exists()


def test_ctrl_c_closes_the_run_s_browsers_and_their_folders() -> None:
    folder, _ = _killed_run(signal.SIGINT)
    assert not folder.exists()


async def test_an_episode_waits_for_a_free_browser_as_long_as_the_pool_is_open() -> None:
    # An eval queues many more episodes than the pool has browsers: waiting is no failure.
    small = BrowserPool(1)
    try:
        slot = await small.acquire()
        with pytest.raises(BrowserFailedError, match=r"no browser came free within 0.2s"):
            await small.acquire(timeout_s=0.2)
        waiting = asyncio.ensure_future(small.acquire())
        await asyncio.sleep(0.3)
        assert not waiting.done()
        small.release(slot)
        assert await asyncio.wait_for(waiting, 5) is slot
    finally:
        small.close()
