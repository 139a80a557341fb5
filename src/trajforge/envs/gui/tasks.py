"""The built-in GUI task kinds, each a ``Canvas`` laid out from a seed: what ends the task, what
counts as success, and the expert's next move from the canvas's own state.

- ``button``: click the button with a given label among several, some below the fold;
- ``type``: type a word into a text field, then submit it with Enter or the Submit button;
- ``checkbox``: leave exactly the named boxes ticked (some start ticked), then click Submit;
- ``dialog``: a modal dialog over the page: close it (its X, or Escape), or answer it with a
  named button.

A task ends on its first decisive act (any button on the ``button`` page, a submit, the dialog
going away); an ended task takes no further action.
"""

from __future__ import annotations

import random
from abc import abstractmethod
from typing import ClassVar

from trajforge.envs.gui.actions import ClickAt, GuiAction, Press, Scroll, TypeText
from trajforge.envs.gui.canvas import SCREEN_SIZE, Box, Canvas, Widget, text_width

WORDS = (
    "apple",
    "river",
    "stone",
    "cloud",
    "maple",
    "tiger",
    "lemon",
    "piano",
    "ocean",
    "cedar",
    "delta",
    "ember",
    "frost",
    "grape",
    "honey",
    "ivory",
    "koala",
    "lunar",
    "mango",
    "olive",
    "pearl",
    "raven",
    "sugar",
    "tulip",
    "velvet",
    "willow",
    "zebra",
    "amber",
    "basil",
    "coral",
)
MARGIN = 8
SCROLLBAR = 6
BUTTON_HEIGHT = 28


def place(rng: random.Random, sizes: list[tuple[int, int]], page: tuple[int, int]) -> list[Box]:
    """Boxes of the given sizes at random places on a ``page`` (width, height), apart from one
    another by ``MARGIN``."""
    width, height = page
    boxes: list[Box] = []
    for w, h in sizes:
        for _ in range(10_000):
            left = rng.randint(MARGIN, width - SCROLLBAR - MARGIN - w)
            top = rng.randint(MARGIN, height - MARGIN - h)
            box = (left, top, left + w, top + h)
            if all(_apart(box, other) for other in boxes):
                boxes.append(box)
                break
        else:
            raise ValueError(f"cannot place {len(sizes)} widgets on a {width}x{height} page")
    return boxes


def _apart(a: Box, b: Box) -> bool:
    return (
        a[2] + MARGIN <= b[0]
        or b[2] + MARGIN <= a[0]
        or a[3] + MARGIN <= b[1]
        or b[3] + MARGIN <= a[1]
    )


def button(id_: str, label: str, left: int, top: int, layer: int = 0) -> Widget:
    box = (left, top, left + text_width(label) + 24, top + BUTTON_HEIGHT)
    return Widget(id_, "button", box, label, layer=layer)


class GuiTask(Canvas):
    """A canvas with a goal: ``build(seed)`` lays it out, ``next_action()`` is the expert."""

    kind: ClassVar[str]

    @classmethod
    @abstractmethod
    def build(cls, seed: int) -> GuiTask:
        """The task laid out from ``seed`` (the same seed, the same pixels)."""

    @abstractmethod
    def next_action(self) -> GuiAction:
        """What an expert does next from the canvas's state (the task is not finished)."""

    def click(self, widget: Widget) -> GuiAction:
        """Click ``widget``'s centre, scrolling it into view first if it is not."""
        if not self.visible(widget):
            _, top, _, bottom = widget.box
            height = self.size[1]
            target = top - MARGIN if top < self.scroll_y else bottom + MARGIN - height
            return Scroll(dx=0, dy=min(max(target, 0), self.max_scroll) - self.scroll_y)
        x, y = self.on_screen(widget)
        return ClickAt(x=x, y=y)


class ButtonTask(GuiTask):
    kind = "button"

    def __init__(self, widgets: list[Widget], page_height: int, target: str) -> None:
        label = next(w.label for w in widgets if w.id == target)
        super().__init__(f"Click the button labelled {label}.", widgets, page_height=page_height)
        self.target = target

    @classmethod
    def build(cls, seed: int) -> ButtonTask:
        rng = random.Random(seed)
        labels = [w.capitalize() for w in rng.sample(WORDS, rng.randint(3, 6))]
        page_height = rng.choice((SCREEN_SIZE[1], SCREEN_SIZE[1], 420))
        sizes = [(text_width(label) + 24, BUTTON_HEIGHT) for label in labels]
        boxes = place(rng, sizes, (SCREEN_SIZE[0], page_height))
        widgets = [
            button(f"b{k}", lab, box[0], box[1])
            for k, (lab, box) in enumerate(zip(labels, boxes, strict=True))
        ]
        return cls(widgets, page_height, rng.choice(widgets).id)

    @property
    def finished(self) -> bool:
        return bool(self.pressed)

    def reward(self, answer: str | None) -> float:
        return float(self.pressed[:1] == [self.target])

    def next_action(self) -> GuiAction:
        return self.click(self.widgets[self.target])


class TypeTask(GuiTask):
    kind = "type"

    def __init__(self, widgets: list[Widget], word: str, by_enter: bool) -> None:
        super().__init__(f"Type {word} into the text field, then submit it.", widgets)
        self.word = word
        self.by_enter = by_enter

    @classmethod
    def build(cls, seed: int) -> TypeTask:
        rng = random.Random(seed)
        word = rng.choice(WORDS) + str(rng.randint(0, 99))
        left, top = rng.randint(MARGIN, 120), rng.randint(MARGIN, 130)
        widgets = [
            Widget(
                "label",
                "text",
                (left, top, left + 100, top + 16),
                rng.choice(("Name:", "Word:", "Enter text:")),
            ),
            Widget("field", "field", (left, top + 20, left + 170, top + 46)),
            button("submit", "Submit", left, top + 58),
        ]
        return cls(widgets, word, by_enter=rng.random() < 0.5)

    @property
    def finished(self) -> bool:
        return "submit" in self.pressed or ("Enter", "field") in self.keys

    def reward(self, answer: str | None) -> float:
        return float(self.finished and self.widgets["field"].value == self.word)

    def next_action(self) -> GuiAction:
        value = self.widgets["field"].value
        if self.focus != "field":
            return self.click(self.widgets["field"])
        if value != self.word:
            if self.word.startswith(value):
                return TypeText(text=self.word[len(value) :])
            return Press(key="Backspace")
        return Press(key="Enter") if self.by_enter else self.click(self.widgets["submit"])


class CheckboxTask(GuiTask):
    kind = "checkbox"

    def __init__(self, widgets: list[Widget], wanted: set[str]) -> None:
        names = [w.label for w in widgets if w.id in wanted]
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        super().__init__(f"Tick {listed} and no other box, then click Submit.", widgets)
        self.wanted = wanted

    @classmethod
    def build(cls, seed: int) -> CheckboxTask:
        rng = random.Random(seed)
        labels = rng.sample(WORDS, rng.randint(3, 6))
        left, top = rng.randint(MARGIN, 150), rng.randint(MARGIN, 40)
        widgets = [
            Widget(
                f"c{k}",
                "checkbox",
                (left, top + 26 * k, left + 24 + text_width(lab), top + 26 * k + 14),
                lab,
                checked=rng.random() < 0.3,
            )
            for k, lab in enumerate(labels)
        ]
        widgets.append(button("submit", "Submit", left, top + 26 * len(labels) + 6))
        boxes = [w.id for w in widgets if w.role == "checkbox"]
        return cls(widgets, set(rng.sample(boxes, rng.randint(1, min(3, len(boxes))))))

    @property
    def finished(self) -> bool:
        return "submit" in self.pressed

    def reward(self, answer: str | None) -> float:
        ticked = {w.id for w in self.widgets.values() if w.role == "checkbox" and w.checked}
        return float(self.finished and ticked == self.wanted)

    def next_action(self) -> GuiAction:
        for widget in self.widgets.values():
            if widget.role == "checkbox" and widget.checked != (widget.id in self.wanted):
                return self.click(widget)
        return self.click(self.widgets["submit"])


CLOSE = "close"
DIALOG_CHOICES = ("OK", "Cancel", "Save", "Delete", "Keep", "Discard", "Retry")


class DialogTask(GuiTask):
    kind = "dialog"

    def __init__(self, widgets: list[Widget], goal: str, by_escape: bool) -> None:
        if goal == CLOSE:
            instruction = "Close the dialog without clicking any of its buttons."
        else:
            instruction = f"Answer the dialog by clicking {self._label(widgets, goal)}."
        super().__init__(instruction, widgets)
        self.goal = goal
        self.by_escape = by_escape

    @staticmethod
    def _label(widgets: list[Widget], id_: str) -> str:
        return next(w.label for w in widgets if w.id == id_)

    @classmethod
    def build(cls, seed: int) -> DialogTask:
        rng = random.Random(seed)
        page = [button(f"p{k}", w.capitalize(), 0, 0) for k, w in enumerate(rng.sample(WORDS, 3))]
        for widget, box in zip(
            page, place(rng, [(w.box[2], w.box[3]) for w in page], SCREEN_SIZE), strict=True
        ):
            widget.box = box
        width, height = rng.randint(200, 260), rng.randint(110, 140)
        left = rng.randint(MARGIN, SCREEN_SIZE[0] - SCROLLBAR - MARGIN - width)
        top = rng.randint(MARGIN, SCREEN_SIZE[1] - MARGIN - height)
        right, bottom = left + width, top + height
        first, second = rng.sample(DIALOG_CHOICES, 2)
        d1 = button("d1", second, 0, bottom - 40, layer=1)
        d1.box = (right - 12 - d1.box[2], d1.box[1], right - 12, d1.box[3])
        d0 = button("d0", first, 0, bottom - 40, layer=1)
        d0.box = (d1.box[0] - 10 - d0.box[2], d0.box[1], d1.box[0] - 10, d0.box[3])
        widgets = [
            *page,
            Widget(
                "dialog",
                "dialog",
                (left, top, right, bottom),
                rng.choice(("Unsaved changes", "Confirm", "Notice")),
                layer=1,
            ),
            Widget(
                "message",
                "text",
                (left + 8, top + 34, right - 8, top + 50),
                rng.choice(
                    ("Do you want to continue?", "This cannot be undone.", "Choose an option.")
                ),
                layer=1,
            ),
            Widget(CLOSE, "button", (right - 26, top + 4, right - 4, top + 26), "X", layer=1),
            d0,
            d1,
        ]
        return cls(widgets, rng.choice((CLOSE, "d0", "d1")), by_escape=rng.random() < 0.5)

    @property
    def finished(self) -> bool:
        return not self.dialog_open

    def reward(self, answer: str | None) -> float:
        last = self.pressed[-1] if self.pressed else None
        if self.goal == CLOSE:
            return float(not self.dialog_open and last in (None, CLOSE))
        return float(last == self.goal)

    def next_action(self) -> GuiAction:
        if self.goal == CLOSE and self.by_escape:
            return Press(key="Escape")
        return self.click(self.widgets[self.goal])


KINDS: dict[str, type[GuiTask]] = {
    cls.kind: cls for cls in (ButtonTask, TypeTask, CheckboxTask, DialogTask)
}
