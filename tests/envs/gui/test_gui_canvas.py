"""The canvas and the task kinds: deterministic pixels per seed, what clicks and keys do, and
success read from the screen's own state."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from trajforge.envs.gui import ActionError, Click, ClickAt, Done, Press, Scroll, TypeText
from trajforge.envs.gui.canvas import SCREEN_SIZE
from trajforge.envs.gui.tasks import (
    CLOSE,
    KINDS,
    ButtonTask,
    CheckboxTask,
    DialogTask,
    GuiTask,
    TypeTask,
)
from trajforge.schema import ImagePart


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_seed_draws_the_same_pixels_every_time(kind: str) -> None:
    shots = {KINDS[kind].build(seed).screenshot() for seed in range(6)}
    assert len(shots) == 6  # different seeds, different screens
    again = KINDS[kind].build(3)
    assert again.screenshot() == KINDS[kind].build(3).screenshot()
    assert again.instruction == KINDS[kind].build(3).instruction
    shot = again.screenshot()
    assert ImagePart.from_bytes(shot).media_type == "image/png"
    assert Image.open(io.BytesIO(shot)).size == SCREEN_SIZE == again.size


def _solve(task: GuiTask, limit: int = 20) -> GuiTask:
    for _ in range(limit):
        if task.finished:
            return task
        task.apply(task.next_action())
    raise AssertionError(f"{task.kind} not finished after {limit} actions")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_expert_moves_solve_every_kind(kind: str) -> None:
    for seed in range(25):
        assert _solve(KINDS[kind].build(seed)).reward(None) == 1.0, (kind, seed)


def test_a_button_below_the_fold_is_scrolled_to_first() -> None:
    task = next(
        t for seed in range(200) if not (t := ButtonTask.build(seed)).visible(t.widgets[t.target])
    )
    move = task.next_action()
    assert isinstance(move, Scroll) and move.dy > 0
    before = task.screenshot()
    assert task.apply(move) == f"scrolled by (0, {move.dy})"
    assert task.screenshot() != before
    assert task.visible(task.widgets[task.target])
    assert task.apply(Scroll(dx=0, dy=10_000)).startswith("scrolled by (0, ")
    assert task.scroll_y == task.max_scroll
    assert task.apply(Scroll(dx=0, dy=50)) == "scrolled by (0, 50): the page did not move"


def test_the_wrong_button_ends_the_task_unsolved() -> None:
    task = ButtonTask.build(1)
    wrong = next(w for w in task.widgets.values() if w.id != task.target and task.visible(w))
    task.apply(ClickAt(x=wrong.center[0], y=wrong.center[1] - task.scroll_y))
    assert task.finished and task.reward(None) == 0.0


def test_a_click_on_nothing_changes_nothing() -> None:
    task = ButtonTask.build(2)
    empty = next(
        (x, y)
        for y in range(0, SCREEN_SIZE[1], 4)
        for x in range(0, SCREEN_SIZE[0], 4)
        if task.hit(x, y) is None
    )
    before = task.screenshot()
    assert task.apply(ClickAt(x=empty[0], y=empty[1])) == f"clicked at ({empty[0]}, {empty[1]})"
    assert task.screenshot() == before and not task.finished


def test_typing_goes_to_the_focused_field_only() -> None:
    task = TypeTask.build(4)
    assert task.apply(TypeText(text="abc")) == "typed 3 characters"
    assert task.widgets["field"].value == ""  # nothing had the focus
    x, y = task.on_screen(task.widgets["field"])
    task.apply(ClickAt(x=x, y=y))
    task.apply(TypeText(text=task.word + "x"))
    task.apply(Press(key="Backspace"))
    assert task.widgets["field"].value == task.word and not task.finished
    task.apply(Press(key="Enter"))
    assert task.finished and task.reward(None) == 1.0


def test_a_wrong_word_submitted_fails() -> None:
    task = TypeTask.build(5)
    x, y = task.on_screen(task.widgets["field"])
    task.apply(ClickAt(x=x, y=y))
    task.apply(TypeText(text="wrong"))
    x, y = task.on_screen(task.widgets["submit"])
    task.apply(ClickAt(x=x, y=y))
    assert task.finished and task.reward(None) == 0.0


def test_checkboxes_must_match_exactly_when_submitted() -> None:
    task = CheckboxTask.build(6)
    for widget in task.widgets.values():
        if widget.role == "checkbox" and not widget.checked:
            task.apply(ClickAt(x=widget.box[0] + 5, y=widget.box[1] + 5))
    assert not task.finished  # ticking is not submitting
    x, y = task.on_screen(task.widgets["submit"])
    task.apply(ClickAt(x=x, y=y))
    boxes = [w for w in task.widgets.values() if w.role == "checkbox"]
    assert task.finished
    assert task.reward(None) == float(len(task.wanted) == len(boxes))


def test_a_dialog_blocks_the_page_and_its_buttons_answer_it() -> None:
    task = next(t for seed in range(50) if (t := DialogTask.build(seed)).goal == CLOSE)
    page = task.widgets["p0"]
    if not task.widgets["dialog"].contains(*page.center):
        task.apply(ClickAt(x=page.center[0], y=page.center[1]))
        assert task.pressed == [] and task.dialog_open
    x, y = task.on_screen(task.widgets["d0"])
    task.apply(ClickAt(x=x, y=y))
    assert task.finished and task.reward(None) == 0.0  # answered, not closed
    closed = next(t for seed in range(50) if (t := DialogTask.build(seed)).goal == CLOSE)
    assert closed.apply(Press(key="Escape")) == "pressed Escape"
    assert closed.finished and closed.reward(None) == 1.0


@pytest.mark.parametrize(
    ("action", "line"),
    [
        (ClickAt(x=320, y=5), "click_at: (320, 5) is outside the 320x240 screen"),
        (ClickAt(x=-1, y=5), "click_at: (-1, 5) is outside the 320x240 screen"),
        (Press(key="F13"), "press: unknown key 'F13'; keys: Enter, Tab, Escape, Backspace, Space, or one character"),
        (Press(key="Enter", element="3"), "press: this screen has no element ids; leave element out (keys go to the focused field, scrolling to the page)"),
        (Scroll(dx=0, dy=5, element="3"), "scroll: this screen has no element ids; leave element out (keys go to the focused field, scrolling to the page)"),
        (Click(element="3"), "click: this screen is driven by coordinates, not element ids"),
        (Done(), "done: ends the episode; the environment handles it, not the screen"),
    ],
)  # fmt: skip
def test_actions_the_screen_refuses_are_one_line(action: object, line: str) -> None:
    task = ButtonTask.build(0)
    before = task.screenshot()
    with pytest.raises(ActionError) as caught:
        task.apply(action)  # type: ignore[arg-type]
    assert str(caught.value) == line
    assert task.screenshot() == before
