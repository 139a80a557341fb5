"""The pixel-only GUI env through the rollout: screenshots as image parts, the coordinate
expert, a wrong agent, bad calls answered in one line, images stored once, and the Screen API
a user implements."""

from __future__ import annotations

import hashlib
import io
import sqlite3
from pathlib import Path

import pytest
from PIL import Image
from screen_reader import play_screens

from trajforge.envs import get_env
from trajforge.envs.gui import (
    PIXEL_ACTIONS,
    ActionError,
    ClickAt,
    GuiAction,
    Screen,
    ScreenEnv,
    replay,
)
from trajforge.envs.gui.builtin import expert, generate_tasks, make_env, screen_for
from trajforge.envs.gui.env import AFTER_ACTION, NOT_RUN
from trajforge.envs.gui.tasks import ButtonTask
from trajforge.formats.tool_calls import format_tool_call
from trajforge.schema import Message, OutcomeStatus, Role, Task
from trajforge.store.sqlite import TrajectoryStore


def test_the_expert_solves_at_least_95_percent_of_40_seeds() -> None:
    tasks = generate_tasks(40, seed=0)
    assert len({t.data["kind"] for t in tasks}) == 4
    trajs = play_screens(make_env, tasks, expert)
    solved = sum(t.outcome.status is OutcomeStatus.OK and t.outcome.reward == 1.0 for t in trajs)
    assert solved >= 38, f"the expert solved {solved} of 40"


def test_registered_as_gui_with_pixel_tools_and_its_expert() -> None:
    entry = get_env("gui")
    assert entry.tool_names() == list(PIXEL_ACTIONS)
    [task] = entry.tasks(1, seed=3)
    assert task.env == "gui" and task.prompt == screen_for(task).instruction
    assert entry.expert(task, []) == expert(task, [])
    assert not set(t.id for t in entry.tasks(30, split="test")) & set(t.id for t in entry.tasks(30))


def _button_task() -> Task:
    return next(t for t in generate_tasks(40, seed=1) if t.data["kind"] == "button")


def test_screenshots_are_image_parts_after_every_action() -> None:
    task = _button_task()
    [traj] = play_screens(make_env, [task], expert)
    opening = traj.messages[1]
    assert opening.role is Role.USER and opening.text.startswith(task.prompt)
    assert opening.images[0].data == screen_for(task).screenshot()
    assistants = [i for i, m in enumerate(traj.messages) if m.role is Role.ASSISTANT]
    for i in assistants[:-1]:  # every step but the last is followed by the screen after it
        shown = traj.messages[i + 2]
        assert shown.role is Role.USER and shown.text == AFTER_ACTION
        state = replay(screen_for(task), traj.messages[: i + 2])
        assert shown.images[0].data == state.screenshot()
    assert traj.messages[-1].role is Role.TOOL  # the final step shows no screen
    assert traj.outcome.reward == 1.0


def _wrong_button(task: Task, messages: list[Message]) -> str | None:
    screen = replay(screen_for(task), messages)
    assert isinstance(screen, ButtonTask)
    wrong = next(w for w in screen.widgets.values() if w.id != screen.target and screen.visible(w))
    return format_tool_call("click_at", dict(zip("xy", screen.on_screen(wrong), strict=True)))


def test_a_wrong_agent_fails_and_a_reply_without_a_call_ends_the_episode() -> None:
    [traj] = play_screens(make_env, [_button_task()], _wrong_button)
    assert traj.outcome.status is OutcomeStatus.OK and traj.outcome.reward == 0.0
    [quits] = play_screens(make_env, [_button_task()], lambda task, messages: "I give up.")
    assert quits.outcome.reward == 0.0 and quits.messages[-1].text == "I give up."


BAD_CALLS = [
    '<tool_call>{"name": "click_at", "arguments": {"x": 1,</tool_call>',
    format_tool_call("drag", {"x": 1}),
    format_tool_call("click_at", {"x": 5, "y": "abc"}),
    format_tool_call("click_at", {"x": 5000, "y": 5}),
    format_tool_call("press", {"key": "Hyper"}),
]


def _bad_then_expert(task: Task, messages: list[Message]) -> str | None:
    turn = sum(m.role is Role.ASSISTANT for m in messages)
    return BAD_CALLS[turn] if turn < len(BAD_CALLS) else expert(task, messages)


def test_bad_calls_are_one_line_errors_and_the_episode_goes_on(tmp_path: Path) -> None:
    [traj] = play_screens(make_env, [_button_task()], _bad_then_expert)
    results = [m.text for m in traj.messages if m.role is Role.TOOL][: len(BAD_CALLS)]
    assert results[0].startswith("Error: malformed tool call: ")
    assert results[1:] == [
        "Error: unknown action 'drag'; available: " + ", ".join(PIXEL_ACTIONS),
        "Error: click_at: y must be an integer, got 'abc'",
        "Error: click_at: (5000, 5) is outside the 320x240 screen",
        "Error: press: unknown key 'Hyper'; keys: Enter, Tab, Escape, Backspace, Space, or one character",
    ]
    assert all("\n" not in r for r in results)
    assert traj.outcome.status is OutcomeStatus.OK and traj.outcome.reward == 1.0


def _images(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return sorted(h for (h,) in conn.execute("SELECT sha256 FROM images"))


def test_each_distinct_screenshot_is_stored_once(tmp_path: Path) -> None:
    tasks = [_button_task(), *generate_tasks(3, seed=2)]
    path = tmp_path / "gui.db"
    with TrajectoryStore(path) as store:
        # the bad calls leave the screen as it was: the same screenshot, turn after turn
        trajs = play_screens(make_env, tasks, _bad_then_expert, store=store)
        back = [store.get(t.id) for t in trajs]
    parts = [p for t in trajs for m in t.messages for p in m.images]
    distinct = {p.sha256 for p in parts}
    assert len(parts) > len(distinct)
    assert _images(path) == sorted(distinct)
    for p in parts:
        assert p.sha256 == hashlib.sha256(p.data or b"").hexdigest()
    assert [[p.data for m in t.messages for p in m.images] for t in back] == [
        [p.data for m in t.messages for p in m.images] for t in trajs
    ]


class Lamp(Screen):
    """A user's own screen: one lamp, switched by clicking its left half."""

    def __init__(self) -> None:
        self.on = False
        self.closed = False

    @property
    def instruction(self) -> str:
        return "Switch the lamp on, then say done."

    @property
    def size(self) -> tuple[int, int]:
        return (40, 20)

    def screenshot(self) -> bytes:
        out = io.BytesIO()
        Image.new("RGB", self.size, (255, 255, 0) if self.on else (0, 0, 0)).save(out, "PNG")
        return out.getvalue()

    def apply(self, action: GuiAction) -> str:
        if not isinstance(action, ClickAt):
            raise ActionError(f"{action.name}: the lamp only takes clicks")
        self.on = self.on or action.x < 20
        return "click"

    @property
    def finished(self) -> bool:
        return False

    def reward(self, answer: str | None) -> float:
        return float(self.on and answer == "on")

    def close(self) -> None:
        self.closed = True


def test_a_users_screen_becomes_an_env() -> None:
    lamps: list[Lamp] = []

    def make_screen(task: Task) -> Lamp:
        lamps.append(Lamp())
        return lamps[-1]

    def agent(task: Task, messages: list[Message]) -> str:
        turn = sum(m.role is Role.ASSISTANT for m in messages)
        calls = [
            format_tool_call("type_text", {"text": "x"}),
            format_tool_call("click_at", {"x": 5, "y": 5})
            + format_tool_call("done", {"answer": "on"})
            + format_tool_call("click_at", {"x": 30, "y": 5}),
        ]
        return calls[turn]

    task = Task(id="lamp-1", prompt="Switch the lamp on, then say done.")

    def env() -> ScreenEnv:
        return ScreenEnv(make_screen, name="lamp", actions=("click_at", "type_text", "done"))

    [traj] = play_screens(env, [task], agent)
    results = [m.text for m in traj.messages if m.role is Role.TOOL]
    assert results == ["Error: type_text: the lamp only takes clicks", "click", "done", NOT_RUN]
    assert traj.outcome.reward == 1.0
    assert [t.name for t in traj.tools] == ["click_at", "type_text", "done"]
    assert all(lamp.closed for lamp in lamps)


def test_a_task_without_a_kind_or_seed_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"^task 't1': data.kind must be one of button, type, checkbox, dialog, got 'maze'$"):  # fmt: skip
        screen_for(Task(id="t1", prompt="p", data={"kind": "maze", "seed": 1}))
    with pytest.raises(ValueError, match=r"^task 't2': data.seed must be an integer, got '7'$"):
        screen_for(Task(id="t2", prompt="p", data={"kind": "button", "seed": "7"}))
