"""BrowserGym's own MiniWoB++ task classes set up and judge episodes on the pooled browser."""

from __future__ import annotations

import pytest

from trajforge.envs.browser import BrowserEnv, BrowserPool, benchmark

from .helpers import calls, element

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("solve", "reward"), [(True, 1.0), (False, 0.0)])
async def test_a_browsergym_click_test_episode(
    pool: BrowserPool, solve: bool, reward: float
) -> None:
    bench = benchmark("browsergym:miniwob.click-test")
    (task,) = bench.tasks(1, seed=0, split="train")
    env = BrowserEnv(bench, pool=pool)
    try:
        opening = await env.reset(task)
        goal, _, tree = opening[-1].text.partition("\n\nPage:\n")
        assert goal == "Task: Click the button."
        action = (
            ("click", {"element": element(tree, "button", "Click Me!")}) if solve else ("done", {})
        )
        result = await env.step(calls(action))
    finally:
        await env.close()
    assert (result.done, result.reward) == (True, reward)
