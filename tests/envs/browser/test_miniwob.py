"""MiniWoB++ episodes on real Chromium: scripted right answers earn the benchmark's reward,
wrong ones do not; bad calls are one-line tool results."""

from __future__ import annotations

import pytest

from trajforge.envs.browser import BrowserEnv, BrowserPool, MiniWoB
from trajforge.schema import Message, Task

from .helpers import calls, element

pytestmark = pytest.mark.slow


def _task(name: str, seed: int) -> Task:
    return Task(id=f"{name}/{seed}", prompt=name, data={"task": name, "seed": seed})


async def _opened(
    pool: BrowserPool, name: str, seed: int, **kwargs: object
) -> tuple[BrowserEnv, str, str]:
    env = BrowserEnv(MiniWoB((name,)), pool=pool, **kwargs)  # type: ignore[arg-type]
    opening = await env.reset(_task(name, seed))
    text = opening[-1].text
    goal, _, tree = text.partition("\n\nPage:\n")
    return env, goal.removeprefix("Task: "), tree


def _quoted(goal: str) -> str:
    return goal.split('"')[1]


def _other(tree: str, role: str, name: str) -> str:
    """The name of another element of ``role`` than ``name``."""
    for line in tree.splitlines():
        if f"] {role} '" in line and f"'{name}'" not in line:
            return line.split("'")[1]
    raise AssertionError(f"no other {role} in:\n{tree}")


async def _play(env: BrowserEnv, *turns: Message) -> tuple[float, bool]:
    try:
        for turn in turns:
            result = await env.step(turn)
            if result.done:
                return result.reward, True
        return result.reward, False
    finally:
        await env.close()


@pytest.mark.parametrize("seed", [3, 11])
async def test_click_button_right_and_wrong(pool: BrowserPool, seed: int) -> None:
    env, goal, tree = await _opened(pool, "click-button", seed)
    target = element(tree, "button", _quoted(goal))
    assert await _play(env, calls(("click", {"element": target}))) == (1.0, True)

    env, goal, tree = await _opened(pool, "click-button", seed)
    wrong = element(tree, "button", _other(tree, "button", _quoted(goal)))
    reward, done = await _play(env, calls(("click", {"element": wrong})))
    assert done and reward <= 0


async def test_click_link_right_and_wrong(pool: BrowserPool) -> None:
    env, goal, tree = await _opened(pool, "click-link", 5)
    link = _quoted(goal)
    assert await _play(env, calls(("click", {"element": element(tree, "StaticText", link)}))) == (
        1.0,
        True,
    )

    env, goal, tree = await _opened(pool, "click-link", 5)
    other = next(
        line.split("] StaticText ")[1].strip("'")
        for line in tree.splitlines()
        if "] StaticText '" in line and f"'{_quoted(goal)}'" not in line
    )
    reward, done = await _play(
        env, calls(("click", {"element": element(tree, "StaticText", other)}))
    )
    assert done and reward <= 0


async def test_enter_text_fills_and_submits(pool: BrowserPool) -> None:
    env, goal, tree = await _opened(pool, "enter-text", 7)
    box, submit = element(tree, "textbox", ""), element(tree, "button", "Submit")
    first = await env.step(calls(("fill", {"element": box, "text": _quoted(goal)})))
    assert not first.done and first.reward == 0.0
    assert f"value='{_quoted(goal)}'" in first.observations[-1].text
    assert await _play(env, calls(("click", {"element": submit}))) == (1.0, True)

    env, goal, tree = await _opened(pool, "enter-text", 7)
    box, submit = element(tree, "textbox", ""), element(tree, "button", "Submit")
    reward, done = await _play(
        env,
        calls(
            ("fill", {"element": box, "text": "not " + _quoted(goal)}),
            ("click", {"element": submit}),
        ),
    )
    assert done and reward <= 0


async def test_a_bad_element_id_or_call_is_one_line_and_the_episode_goes_on(
    pool: BrowserPool,
) -> None:
    env, goal, tree = await _opened(pool, "click-button", 1)
    result = await env.step(
        calls(("click", {"element": "9999"}), ("click", {"x": 1}), ("teleport", {}))
    )
    texts = [m.text for m in result.observations]
    assert texts[0] == "Error: click: no element with id '9999' on the page"
    assert texts[1].startswith("Error: click: ") and "\n" not in texts[1]
    assert texts[2].startswith("Error: unknown action 'teleport'")
    assert not result.done and "Page:\n" in result.observations[-1].text
    target = element(tree, "button", _quoted(goal))
    assert await _play(env, calls(("click", {"element": target}))) == (1.0, True)


async def test_done_and_a_reply_without_a_call_end_the_episode_unsolved(pool: BrowserPool) -> None:
    env, _, _ = await _opened(pool, "click-button", 2)
    assert await _play(env, calls(("done", {}))) == (0.0, True)
    env, _, _ = await _opened(pool, "click-button", 2)
    assert await _play(env, Message(role="assistant", content="I give up.")) == (0.0, True)


async def test_a_seed_makes_the_same_page_and_a_screenshot_part_comes_when_asked(
    pool: BrowserPool,
) -> None:
    trees = []
    for _ in range(2):
        env, goal, tree = await _opened(pool, "click-button", 42)
        trees.append((goal, tree))
        await env.close()
    assert trees[0] == trees[1]
    env = BrowserEnv(MiniWoB(("click-button",)), pool=pool, screenshot=True)
    try:
        opening = await env.reset(_task("click-button", 42))
        (image,) = opening[-1].images
        assert image.media_type == "image/png" and image.data and image.data[:4] == b"\x89PNG"
    finally:
        await env.close()
