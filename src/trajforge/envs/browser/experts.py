"""Scripted experts for MiniWoB++ tasks, reading only what the agent reads: the instruction and
the page tree of the opening message (element ids stay fixed for an element's life, so a plan
made from the first page holds on later ones).

An expert plans every action from the opening page and plays one per turn, finding its place
again from the tool results the environment accepted (an error result means the action is made
again), then calls ``done``. ``EXPERT_TASKS`` names the tasks that have one; ``expert_refusal``
is the one line that refuses the expert policy for tasks that have none. A synthesized task
(``trajforge.envs.synthesizers.web``) is planned from its check, the state to reach, in place
of its instruction.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from trajforge.envs.browser.axtree import FIELD_ROLES, elements, find
from trajforge.envs.browser.pagestate import CHECK, PageCheck
from trajforge.envs.builtin.plan import PlannedCall, follow_plan
from trajforge.formats import format_tool_call
from trajforge.schema import Message, Role, Task

GOAL_PREFIX = "Task: "
PAGE_SEPARATOR = "\n\nPage:\n"
# The text field lines of a page tree (``[16] textbox ''``), in page order.
_TEXTBOX = re.compile(r"^\t*\[(\w+)\] textbox ", re.M)

Planner = Callable[[str, str], list[PlannedCall]]
"""``planner(goal, tree)``: every action of the episode, in order."""


class ExpertError(ValueError):
    """The page or the instruction is not what the task's expert reads (one line)."""


def opening(messages: Sequence[Message]) -> tuple[str, str]:
    """The instruction and the page tree of an episode's opening user message."""
    first = next((m for m in messages if m.role is Role.USER), None)
    if first is None:
        raise ExpertError("the conversation has no opening user message")
    goal, _, tree = first.text.partition(PAGE_SEPARATOR)
    return goal.removeprefix(GOAL_PREFIX).strip(), tree


def _quoted(goal: str) -> list[str]:
    return re.findall(r'"([^"]*)"', goal)


def _match(pattern: str, goal: str) -> re.Match[str]:
    found = re.fullmatch(pattern, goal)
    if found is None:
        raise ExpertError(f"instruction {goal!r} does not read as {pattern!r}")
    return found


def _element(tree: str, role: str, name: str) -> str:
    found = find(tree, role, name)
    if found is None:
        raise ExpertError(f"no {role} {name!r} on the page")
    return found


def _textboxes(tree: str, n: int) -> list[str]:
    ids = _TEXTBOX.findall(tree)
    if len(ids) < n:
        raise ExpertError(f"the page has {len(ids)} text fields, the task needs {n}")
    return ids[:n]


def _click(element: str) -> PlannedCall:
    return ("click", {"element": element})


def _fill(element: str, text: str) -> PlannedCall:
    return ("fill", {"element": element, "text": text})


def click_button(goal: str, tree: str) -> list[PlannedCall]:
    name = _match(r'Click on the "(.*)" button\.', goal).group(1)
    return [_click(_element(tree, "button", name))]


def click_link(goal: str, tree: str) -> list[PlannedCall]:
    name = _match(r'Click on the link "(.*)"\.', goal).group(1)
    return [_click(_element(tree, "StaticText", name))]


def click_dialog(goal: str, tree: str) -> list[PlannedCall]:
    _match(r'Close the dialog box by clicking the "x"\.', goal)
    return [_click(_element(tree, "button", "Close"))]


def click_tab(goal: str, tree: str) -> list[PlannedCall]:
    number = _match(r"Click on Tab #(\d+)\.", goal).group(1)
    return [_click(_element(tree, "link", f"Tab #{number}"))]


def focus_text(goal: str, tree: str) -> list[PlannedCall]:
    _match(r"Focus into the textbox\.", goal)
    return [_click(_textboxes(tree, 1)[0])]


def enter_text(goal: str, tree: str) -> list[PlannedCall]:
    text = _match(r'Enter "(.*)" into the text field and press Submit\.', goal).group(1)
    return [_fill(_textboxes(tree, 1)[0], text), _click(_element(tree, "button", "Submit"))]


def enter_password(goal: str, tree: str) -> list[PlannedCall]:
    password = _match(
        r'Enter the password "(.*)" into both text fields and press submit\.', goal
    ).group(1)
    first, second = _textboxes(tree, 2)
    return [
        _fill(first, password),
        _fill(second, password),
        _click(_element(tree, "button", "Submit")),
    ]


def login_user(goal: str, tree: str) -> list[PlannedCall]:
    found = _match(
        r'Enter the username "(.*)" and the password "(.*)" into the text fields and press '
        r"login\.",
        goal,
    )
    user_box, password_box = _textboxes(tree, 2)
    return [
        _fill(user_box, found.group(1)),
        _fill(password_box, found.group(2)),
        _click(_element(tree, "button", "Login")),
    ]


def _submit_after(role: str, names: list[str], tree: str) -> list[PlannedCall]:
    clicks = [_click(_element(tree, role, name)) for name in names]
    return [*clicks, _click(_element(tree, "button", "Submit"))]


def click_checkboxes(goal: str, tree: str) -> list[PlannedCall]:
    listed = _match(r"Select (.*) and click Submit\.", goal).group(1)
    names = [] if listed == "nothing" else [n.strip() for n in listed.split(",") if n.strip()]
    return _submit_after("checkbox", names, tree)


def click_option(goal: str, tree: str) -> list[PlannedCall]:
    name = _match(r"Select (.*) and click Submit\.", goal).group(1)
    return _submit_after("radio", [name], tree)


def choose_list(goal: str, tree: str) -> list[PlannedCall]:
    option = _match(r"Select (.*) from the list and click Submit\.", goal).group(1)
    box = re.search(r"^\t*\[(\w+)\] combobox ", tree, re.M)
    if box is None:
        raise ExpertError("no combobox on the page")
    return [
        ("select", {"element": box.group(1), "option": option}),
        _click(_element(tree, "button", "Submit")),
    ]


def click_button_sequence(goal: str, tree: str) -> list[PlannedCall]:
    first, second = _match(r"Click button (\w+), then click button (\w+)\.", goal).groups()
    return [_click(_element(tree, "button", first)), _click(_element(tree, "button", second))]


def checked(check: PageCheck, tree: str) -> list[PlannedCall]:
    """A synthesized task's plan (``pagestate``): each field the page tree shows set to the
    checked value where it differs, then the checked buttons pressed."""
    fields = [e for e in elements(tree) if e.role in FIELD_ROLES]
    if len(fields) != len(check.values):
        raise ExpertError(f"the page has {len(fields)} fields, the task checks {len(check.values)}")
    calls: list[PlannedCall] = []
    for element, want in zip(fields, check.values, strict=True):
        if element.role == "textbox" and want != (element.value or ""):
            calls.append(_fill(element.bid, str(want)))
        elif element.role == "combobox" and want != element.value:
            calls.append(("select", {"element": element.bid, "option": str(want)}))
        elif (element.role == "checkbox" and want is not element.checked) or (
            element.role == "radio" and want is True and not element.checked
        ):
            calls.append(_click(element.bid))
    return [*calls, *(_click(_element(tree, "button", name)) for name in check.pressed)]


PLANNERS: dict[str, Planner] = {
    "click-button": click_button,
    "click-button-sequence": click_button_sequence,
    "click-checkboxes": click_checkboxes,
    "click-dialog": click_dialog,
    "click-link": click_link,
    "click-option": click_option,
    "click-tab": click_tab,
    "choose-list": choose_list,
    "enter-password": enter_password,
    "enter-text": enter_text,
    "focus-text": focus_text,
    "login-user": login_user,
}
"""The planner of every MiniWoB++ task that has an expert."""

EXPERT_TASKS: tuple[str, ...] = tuple(sorted(PLANNERS))
"""The MiniWoB++ tasks with a scripted expert."""

DONE = format_tool_call("done", {})


def plan(task: Task, messages: Sequence[Message]) -> list[PlannedCall]:
    """Every action of ``task``'s episode, planned from its opening message (a synthesized
    task's from its check).

    Raises:
        ExpertError: the task has no expert, or its page or instruction is not as expected.
    """
    name = str(task.data.get("task", ""))
    planner = PLANNERS.get(name)
    if planner is None:
        raise ExpertError(f"miniwob task {name!r} has no scripted expert")
    goal, tree = opening(messages)
    try:
        if CHECK in task.data:
            return checked(PageCheck.model_validate(task.data[CHECK]), tree)
        return planner(goal, tree)
    except ExpertError as exc:
        raise ExpertError(f"{name} expert: {exc}") from exc


def expert(task: Task, messages: list[Message]) -> str | None:
    """The next action of the plan (one a turn), then ``done``."""
    return follow_plan(plan(task, messages), messages, DONE)


def expert_refusal(names: Sequence[str]) -> str | None:
    """The one line refusing the expert policy for tasks among ``names`` without an expert
    (``None``: every task has one)."""
    missing = [n for n in names if n not in PLANNERS]
    if not missing:
        return None
    return (
        f"policy 'expert': no scripted expert for miniwob task {', '.join(missing)}; "
        f"the tasks with one: {', '.join(EXPERT_TASKS)}"
    )
