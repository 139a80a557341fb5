"""``Canvas``: a ``Screen`` drawn in code with PIL: buttons, text fields, checkboxes, labels and
modal dialogs on a page that may be taller than the screen (scrolled by ``scroll``).

The canvas does what a window system does with clicks and keys: a click hits the topmost
visible widget under it (while a dialog is open only the dialog's widgets take clicks), a text
field takes the focus and then the typed text, a checkbox toggles, a button is recorded as
pressed. What ends a task and what counts as success is the task's (``trajforge.envs.gui.tasks``
subclasses ``Canvas``). Tool results say what was done in neutral words; what it changed is
seen in the next screenshot only.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import cache
from typing import Literal

from PIL import Image, ImageDraw, ImageFont

from trajforge.envs.gui.actions import (
    ActionError,
    ClickAt,
    Done,
    GuiAction,
    Press,
    Scroll,
    TypeText,
)
from trajforge.envs.gui.screen import Screen

Box = tuple[int, int, int, int]
"""``(left, top, right, bottom)`` in page pixels (right and bottom exclusive)."""

WidgetRole = Literal["button", "field", "checkbox", "text", "dialog"]

SCREEN_SIZE = (320, 240)
FONT_SIZE = 13
KEYS = ("Enter", "Tab", "Escape", "Backspace", "Space")
"""Named keys ``press`` takes; a single character is typed like ``type_text``."""

_BG = (246, 246, 246)
_INK = (20, 20, 20)
_BORDER = (120, 120, 120)
_FOCUS = (30, 100, 220)
_BUTTON = (222, 226, 232)
_DIALOG = (255, 255, 255)
_SHADE = (160, 160, 160)
_SCROLLBAR = (190, 190, 190)


@cache
def font() -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """Pillow's bundled font: the same glyphs on every machine, no system font needed."""
    return ImageFont.load_default(size=FONT_SIZE)


def text_width(text: str) -> int:
    left, _, right, _ = font().getbbox(text)
    return int(right - left)


@dataclass
class Widget:
    """One thing on the page. ``layer`` 1 belongs to the dialog, drawn over the page and placed
    in screen pixels (it does not scroll)."""

    id: str
    role: WidgetRole
    box: Box
    label: str = ""
    value: str = ""
    checked: bool = False
    layer: int = 0

    @property
    def center(self) -> tuple[int, int]:
        left, top, right, bottom = self.box
        return (left + right) // 2, (top + bottom) // 2

    def contains(self, x: int, y: int) -> bool:
        left, top, right, bottom = self.box
        return left <= x < right and top <= y < bottom


class Canvas(Screen):
    """A page of ``widgets`` shown through a ``size`` window, ``page_height`` tall in all.

    Subclasses say when the task ends (``finished``) and how well it went (``reward``)
    from what the canvas records: ``pressed`` (the ids of the buttons clicked, in order),
    ``keys`` (``(key, focused id or None)`` per key pressed), and the widgets' state.
    """

    def __init__(
        self,
        instruction: str,
        widgets: list[Widget],
        *,
        size: tuple[int, int] = SCREEN_SIZE,
        page_height: int | None = None,
    ) -> None:
        self._instruction = instruction
        self.widgets = {w.id: w for w in widgets}
        self._size = size
        self.page_height = max(page_height or size[1], size[1])
        self.scroll_y = 0
        self.focus: str | None = None
        self.dialog_open = any(w.layer == 1 for w in widgets)
        self.pressed: list[str] = []
        self.keys: list[tuple[str, str | None]] = []

    @property
    def instruction(self) -> str:
        return self._instruction

    @property
    def size(self) -> tuple[int, int]:
        return self._size

    @property
    def max_scroll(self) -> int:
        return self.page_height - self._size[1]

    def visible(self, widget: Widget) -> bool:
        """Whether the whole widget is inside the window and not hidden behind a dialog
        (a dialog's widgets are placed in screen pixels, over the page)."""
        if widget.layer == 1 or self.dialog_open:
            return widget.layer == 1 and self.dialog_open
        _, top, _, bottom = widget.box
        return top >= self.scroll_y and bottom <= self.scroll_y + self._size[1]

    def on_screen(self, widget: Widget) -> tuple[int, int]:
        """Where the widget's centre is on the screen (for a visible widget)."""
        x, y = widget.center
        return x, y if widget.layer == 1 else y - self.scroll_y

    def hit(self, x: int, y: int) -> Widget | None:
        """The widget that takes a click at screen pixel (x, y)."""
        layer = 1 if self.dialog_open else 0
        at_y = y if layer == 1 else y + self.scroll_y
        for widget in reversed(self.widgets.values()):  # the last drawn is on top
            if widget.layer == layer and widget.role != "text" and widget.contains(x, at_y):
                return widget
        return None

    def apply(self, action: GuiAction) -> str:
        if isinstance(action, ClickAt):
            return self._click(action.x, action.y)
        if isinstance(action, TypeText):
            self._type(action.text)
            return f"typed {len(action.text)} characters"
        if isinstance(action, Press):
            self._no_element(action.name, action.element)
            return self._press(action.key)
        if isinstance(action, Scroll):
            self._no_element(action.name, action.element)
            return self._scroll(action.dx, action.dy)
        if isinstance(action, Done):
            raise ActionError("done: ends the episode; the environment handles it, not the screen")
        raise ActionError(f"{action.name}: this screen is driven by coordinates, not element ids")

    @staticmethod
    def _no_element(name: str, element: str | None) -> None:
        if element is not None:
            raise ActionError(
                f"{name}: this screen has no element ids; leave element out "
                "(keys go to the focused field, scrolling to the page)"
            )

    def _click(self, x: int, y: int) -> str:
        width, height = self._size
        if not (0 <= x < width and 0 <= y < height):
            raise ActionError(f"click_at: ({x}, {y}) is outside the {width}x{height} screen")
        widget = self.hit(x, y)
        self.focus = None
        if widget is not None:
            if widget.role == "field":
                self.focus = widget.id
            elif widget.role == "checkbox":
                widget.checked = not widget.checked
            elif widget.role == "button":
                self.pressed.append(widget.id)
                if widget.layer == 1:
                    self.dialog_open = False
        return f"clicked at ({x}, {y})"

    def _type(self, text: str) -> None:
        field = self.widgets.get(self.focus or "")
        if field is not None:
            field.value += text

    def _press(self, key: str) -> str:
        if len(key) == 1:
            self._type(key)
        elif key not in KEYS:
            raise ActionError(
                f"press: unknown key {key!r}; keys: {', '.join(KEYS)}, or one character"
            )
        elif key == "Space":
            self._type(" ")
        elif key == "Backspace":
            field = self.widgets.get(self.focus or "")
            if field is not None:
                field.value = field.value[:-1]
        elif key == "Tab":
            fields = [w.id for w in self.widgets.values() if w.role == "field"]
            at = fields.index(self.focus) + 1 if self.focus in fields else 0
            self.focus = fields[at % len(fields)] if fields else None
        elif key == "Escape":
            self.dialog_open = False
        self.keys.append((key, self.focus))
        return f"pressed {key}"

    def _scroll(self, dx: int, dy: int) -> str:
        before = self.scroll_y
        self.scroll_y = min(max(self.scroll_y + dy, 0), self.max_scroll)
        moved = self.scroll_y - before
        sideways = "; the page does not scroll sideways" if dx else ""
        if moved == 0 and dy != 0:
            return f"scrolled by (0, {dy}): the page did not move{sideways}"
        return f"scrolled by (0, {moved}){sideways}"

    def screenshot(self) -> bytes:
        image = self.render()
        out = io.BytesIO()
        image.save(out, format="PNG", optimize=False)
        return out.getvalue()

    def render(self) -> Image.Image:
        """The window onto the page as an RGB image."""
        width, height = self._size
        page = Image.new("RGB", (width, self.page_height), _BG)
        draw = ImageDraw.Draw(page)
        for widget in self.widgets.values():
            if widget.layer == 0:
                self._draw(draw, widget)
        view = page.crop((0, self.scroll_y, width, self.scroll_y + height))
        draw = ImageDraw.Draw(view)
        if self.max_scroll > 0:
            bar = height * height // self.page_height
            top = self.scroll_y * (height - bar) // self.max_scroll
            draw.rectangle((width - 5, top, width - 1, top + bar), fill=_SCROLLBAR)
        if self.dialog_open:
            for widget in self.widgets.values():
                if widget.layer == 1:
                    self._draw(draw, widget)
        return view

    def _draw(self, draw: ImageDraw.ImageDraw, widget: Widget) -> None:
        left, top, right, bottom = widget.box
        mid_y = (top + bottom) // 2
        if widget.role == "button":
            draw.rounded_rectangle((left, top, right - 1, bottom - 1), 4, _BUTTON, _BORDER)
            draw.text(((left + right) // 2, mid_y), widget.label, _INK, font(), anchor="mm")
        elif widget.role == "field":
            focused = self.focus == widget.id
            draw.rectangle((left, top, right - 1, bottom - 1), (255, 255, 255),
                           _FOCUS if focused else _BORDER, 2 if focused else 1)  # fmt: skip
            shown = widget.value + ("|" if focused else "")
            draw.text((left + 5, mid_y), shown, _INK, font(), anchor="lm")
        elif widget.role == "checkbox":
            draw.rectangle((left, top, left + 13, top + 13), (255, 255, 255), _BORDER)
            if widget.checked:
                draw.line((left + 3, top + 7, left + 6, top + 10, left + 11, top + 3), _INK, 2)
            draw.text((left + 20, top + 7), widget.label, _INK, font(), anchor="lm")
        elif widget.role == "dialog":
            draw.rectangle((left + 3, top + 3, right + 2, bottom + 2), _SHADE)
            draw.rectangle((left, top, right - 1, bottom - 1), _DIALOG, _BORDER)
            draw.text((left + 8, top + 8), widget.label, _INK, font())
        else:
            draw.text((left, top), widget.label, _INK, font())
