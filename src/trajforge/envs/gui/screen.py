"""``Screen``: what a pixel-only GUI environment needs from the thing it drives.

A screen is a display the agent sees as a screenshot and acts on by coordinates and the
keyboard (``click_at``, ``type_text``, ``press``, ``scroll``; ``done`` ends the episode). It is
the one observation/action API for GUI agents: a desktop (an OSWorld virtual machine), a phone
(an AndroidWorld emulator) or a screen drawn in code (``trajforge.envs.gui.canvas``) each
implement a ``Screen``, and ``ScreenEnv`` (``trajforge.envs.gui.env``) turns any of them into an
environment whose trajectories hold the screenshots as image parts.

To plug in your own, subclass ``Screen`` and give it:

- ``instruction``: the task in words (the first user message's text);
- ``size``: ``(width, height)`` in pixels, the coordinate space of ``click_at``;
- ``screenshot()``: the display now, as PNG (or JPEG/WebP) bytes;
- ``apply(action)``: perform one action and return a short line saying what was done; raise
  ``ActionError`` (one line) for an action the screen refuses (a click off the screen, an
  unknown key), which the model reads as the call's error;
- ``finished``: whether the task has ended on the screen itself (a form submitted);
- ``reward(answer)``: the task's success in [0, 1], from the screen's own state (and the
  agent's ``done`` answer, for tasks that ask one).

``close()`` releases what the screen holds (a VM, an emulator); ``state_key()`` identifies the
state for step-level credit (by default a hash of the screenshot).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod

from trajforge.envs.gui.actions import GuiAction


class Screen(ABC):
    """A display driven by coordinates and keys; see the module docstring."""

    @property
    @abstractmethod
    def instruction(self) -> str:
        """The task, in words."""

    @property
    @abstractmethod
    def size(self) -> tuple[int, int]:
        """``(width, height)`` in pixels; ``click_at`` takes ``0 <= x < width``, ``0 <= y < height``."""

    @abstractmethod
    def screenshot(self) -> bytes:
        """The display now, encoded as PNG, JPEG or WebP."""

    @abstractmethod
    def apply(self, action: GuiAction) -> str:
        """Perform ``action`` (never ``Done``: the environment ends the episode itself);
        return one line saying what was done.

        Raises:
            ActionError: the screen refuses the action (the line says why).
        """

    @property
    @abstractmethod
    def finished(self) -> bool:
        """Whether the task has ended on the screen (no further action counts)."""

    @abstractmethod
    def reward(self, answer: str | None) -> float:
        """Success in [0, 1], read from the screen's state (``answer``: what ``done`` said)."""

    def state_key(self) -> str:
        """A stable id of the state the next action acts from: what the screen shows."""
        return hashlib.sha256(self.screenshot()).hexdigest()[:16]

    def close(self) -> None:  # noqa: B027 - a screen drawn in memory holds nothing to release
        """Release what the screen holds (a virtual machine, an emulator)."""
