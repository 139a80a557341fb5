"""GUI environments: the shared action vocabulary (element ids for page-tree agents,
coordinates for pixel agents) and tool-call parsing every GUI environment uses; ``Screen``, the
API a display (a desktop, a phone, a screen drawn in code) implements, and ``ScreenEnv``, which
makes any screen an environment. The built-in screens drawn with PIL (``gui`` in the env
registry) live in ``canvas``, ``tasks`` and ``builtin``, loaded only when named."""

from trajforge.envs.gui.actions import (
    ACTIONS,
    PAGE_ACTIONS,
    PIXEL_ACTIONS,
    Action,
    ActionError,
    Click,
    ClickAt,
    Done,
    Fill,
    GuiAction,
    Press,
    Scroll,
    Select,
    TypeText,
    action_spec,
    action_specs,
    parse_action,
    parse_arguments,
)
from trajforge.envs.gui.env import ScreenEnv, replay
from trajforge.envs.gui.screen import Screen

__all__ = [
    "ACTIONS",
    "PAGE_ACTIONS",
    "PIXEL_ACTIONS",
    "Action",
    "ActionError",
    "Click",
    "ClickAt",
    "Done",
    "Fill",
    "GuiAction",
    "Press",
    "Screen",
    "ScreenEnv",
    "Scroll",
    "Select",
    "TypeText",
    "action_spec",
    "action_specs",
    "parse_action",
    "parse_arguments",
    "replay",
]
