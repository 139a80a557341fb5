"""Browser pool hygiene: a crashed or hung browser fails only its episode and is replaced; a
run killed with SIGKILL leaves no browser behind, and the next pool reaps its folder."""

from __future__ import annotations

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
from trajforge.envs.browser.chromium import PID_FILE, reap_leftovers, run_root
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
    assert not any(
        psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in killed
    )
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


def test_a_sigkilled_run_leaves_no_process_and_the_next_start_reaps_its_folder() -> None:
    run = subprocess.Popen(
        [sys.executable, "-c", _RUN], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    try:
        assert run.stdout is not None
        folder, *pids = run.stdout.readline().split()
        assert pids and (Path(folder) / PID_FILE).is_file()
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(
        psutil.pid_exists(int(p)) and psutil.Process(int(p)).status() != "zombie" for p in pids
    ):
        time.sleep(0.1)
    assert not [
        p for p in pids if psutil.pid_exists(int(p)) and psutil.Process(int(p)).status() != "zombie"
    ]
    assert Path(folder).parent == run_root()
    assert reap_leftovers() >= 1
    assert not Path(folder).exists()
