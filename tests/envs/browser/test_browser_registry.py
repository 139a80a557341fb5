"""``miniwob:`` and ``browsergym:`` names in the env registry: tasks, splits, errors (no browser)."""

from __future__ import annotations

import pytest

from trajforge.envs.browser import BrowserEnv, task_names
from trajforge.envs.gui.actions import ACTIONS, PAGE_ACTIONS
from trajforge.envs.registry import EnvSource, get_env
from trajforge.errors import ConfigError


def test_miniwob_tasks_cycle_over_the_named_tasks_with_disjoint_split_seeds() -> None:
    entry = get_env("miniwob:click-button,enter-text")
    assert entry.source is EnvSource.BROWSER
    train, test = entry.tasks(6, seed=0), entry.tasks(6, seed=0, split="test")
    assert [t.data["task"] for t in train] == ["click-button", "enter-text"] * 3
    assert entry.tasks(6, seed=0) == train and entry.tasks(6, seed=1) != train
    assert not {t.data["seed"] for t in train} & {t.data["seed"] for t in test}
    assert all(t.split == "test" and t.env == entry.name for t in test)
    assert entry.tool_names() == list(PAGE_ACTIONS)


def test_the_screenshot_variant_offers_every_gui_action() -> None:
    entry = get_env("miniwob-screenshot:click-test")
    assert entry.tool_names() == list(ACTIONS)
    env = entry.make()
    assert isinstance(env, BrowserEnv) and env.screenshot
    assert entry.tasks(3, seed=0) == get_env("miniwob:click-test").tasks(3, seed=0)


def test_the_package_s_tasks_are_all_offered() -> None:
    assert len(task_names()) > 100
    assert {"click-button", "click-link", "enter-text", "click-test"} <= set(task_names())


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("miniwob:click-buton", "no task 'click-buton' in the miniwob package; did you mean click-button"),
        ("miniwob:", "name a task after 'miniwob:'"),
        ("browsergym:miniwob.click-tst", "no task 'miniwob.click-tst' in browsergym.miniwob; did you mean miniwob.click-test"),
        ("browsergym:nosuchfamily.task", "needs browsergym-nosuchfamily"),
    ],
)  # fmt: skip
def test_a_wrong_browser_env_name_is_one_clear_error(name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"^env |^miniwob: |^browsergym: ") as caught:
        get_env(name)
    assert message in str(caught.value) and "\n" not in str(caught.value)
