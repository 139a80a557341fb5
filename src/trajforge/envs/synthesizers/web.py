"""MiniWoB++ pages (``miniwob:TASK``): act on a page's elements at random, make the form state
reached the task (OS-Genesis's and Explorer's web synthesis).

The explorer reads the opening page tree and makes one to three actions on its form fields
(a text box filled with a word of a small vocabulary, a checkbox or radio button clicked, an
option of a list chosen), then clicks one of its buttons (which ends a MiniWoB episode), one
action a turn. The page records the state reached (``trajforge.envs.browser.pagestate``):
every field's value and the buttons pressed. The new task keeps the page (its MiniWoB task and
seed) and states the changes in words by rule ('Enter "maple" into the "Username" field, then
press "Login".'); its checker, ``data["check"]``, is that state, judged by the browser env in
place of MiniWoB's own reward. The solution is the exploration's own actions; the wrong answer
plays them with one more action before the first button press that changes a field (another
word, a box toggled, another radio or option), or presses another button when there is no
field to change.
"""

from __future__ import annotations

import random

from trajforge.envs.browser.axtree import FIELD_ROLES, Element, elements
from trajforge.envs.browser.experts import DONE, opening
from trajforge.envs.browser.miniwob import PREFIX, MiniWoB
from trajforge.envs.browser.pagestate import (
    CHECK,
    PAGE_STATE,
    RECORD_STATE,
    TEXT_KINDS,
    PageCheck,
    PageField,
    PageState,
)
from trajforge.envs.registry import get_env
from trajforge.envs.synthesizers.base import (
    Action,
    Candidate,
    Synthesizer,
    new_task,
    turn_rng,
)
from trajforge.errors import ConfigError
from trajforge.formats import format_tool_call
from trajforge.schema import ExpertFn, Message, OutcomeStatus, Role, Task, Trajectory

SYNTH_TASKS = (
    "choose-list",
    "click-button",
    "click-checkboxes",
    "click-option",
    "enter-password",
    "enter-text",
    "login-user",
)
"""The MiniWoB++ tasks whose pages are forms: their state is the fields and the button."""
VOCABULARY = ("apple", "river", "maple", "orbit", "lemon", "tiger", "cloud", "pixel")
MAX_FIELD_ACTIONS = 3
_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth")


def _touch(element: Element, rng: random.Random) -> Action:
    """An action that changes the field ``element``, chosen with ``rng``."""
    if element.role == "textbox":
        return ("fill", {"element": element.bid, "text": rng.choice(VOCABULARY)})
    if element.role == "combobox" and element.options:
        return ("select", {"element": element.bid, "option": rng.choice(element.options)})
    return ("click", {"element": element.bid})


def walk(tree: str, rng: random.Random) -> list[Action]:
    """The explorer's actions on a page: a few on its fields, then a button clicked."""
    found = elements(tree)
    fields = [e for e in found if e.role in FIELD_ROLES]
    buttons = [e for e in found if e.role == "button"]
    count = rng.randint(1, MAX_FIELD_ACTIONS) if fields else 0
    actions = [_touch(rng.choice(fields), rng) for _ in range(count)]
    if buttons:
        actions.append(("click", {"element": rng.choice(buttons).bid}))
    return actions


def _reply(message: Message) -> str:
    """An assistant message as the reply that makes it again."""
    if not message.tool_calls:
        return message.text
    return "".join(format_tool_call(c.name, c.arguments) for c in message.tool_calls)


def _quoted(items: list[str]) -> str:
    return ", ".join(f'"{item}"' for item in items)


def _field_name(target: PageField, state: PageState) -> str:
    """How the instruction names a text field: its label, else its place among them."""
    if target.label:
        return f'the "{target.label}" field'
    texts = [f for f in state.fields if f.kind in TEXT_KINDS]
    if len(texts) == 1:
        return "the text field"
    place = next(k for k, f in enumerate(texts) if f is target)
    ordinal = _ORDINALS[place] if place < len(_ORDINALS) else f"{place + 1}th"
    return f"the {ordinal} text field"


def instruction(state: PageState) -> str:
    """The state's changes and presses in words, in page order, then in order pressed."""
    parts: list[str] = []
    changed = state.changed()
    for f in changed:
        if f.kind in TEXT_KINDS:
            parts.append(f'enter "{f.value}" into {_field_name(f, state)}')
        elif f.kind == "select":
            parts.append(f'choose "{f.value}" from the list')
        elif f.kind == "radio":
            parts.append(f'select "{f.label}"')
        else:
            parts.append(f'{"tick" if f.value else "untick"} "{f.label}"')
    parts += [f'press "{name}"' for name in state.pressed]
    said = ", ".join(parts[:-1]) + f", then {parts[-1]}" if len(parts) > 1 else parts[0]
    text = f"{said[0].upper()}{said[1:]}."
    if len(changed) < len(state.fields):
        text += " Leave the other fields as they are."
    return text


def _spoiler(state: PageState, tree: list[Element]) -> Action | None:
    """An action that changes one field to a value other than the state's."""
    options = {e.bid: e.options for e in tree}
    for f in state.fields:
        if f.element is None:
            continue
        if f.kind in TEXT_KINDS:
            word = next(w for w in VOCABULARY if w != f.value)
            return ("fill", {"element": f.element, "text": word})
        if f.kind == "checkbox" or (f.kind == "radio" and not f.value):
            return ("click", {"element": f.element})
        others = [o for o in options.get(f.element, []) if o != f.value]
        if f.kind == "select" and others:
            return ("select", {"element": f.element, "option": others[0]})
    return None


def wrong_replies(
    solution: list[str], source: Trajectory, state: PageState, tree: list[Element]
) -> tuple[str, ...] | None:
    """The solution with one field changed before its first button press (or another button
    pressed); ``None`` when there is nothing to change."""
    buttons = {e.bid for e in tree if e.role == "button"}
    turns = [m for m in source.messages if m.role is Role.ASSISTANT]
    presses = [
        k
        for k, m in enumerate(turns)
        if any(c.name == "click" and c.arguments.get("element") in buttons for c in m.tool_calls)
    ]
    cut = presses[0] if presses else len(solution) - 1
    spoiler = _spoiler(state, tree)
    if spoiler is not None:
        return (*solution[:cut], format_tool_call(*spoiler), *solution[cut:])
    if not presses:
        return None
    pressed = {c.arguments.get("element") for c in turns[cut].tool_calls}
    others = sorted(buttons - pressed)
    if not others:
        return None
    other = format_tool_call("click", {"element": others[0]})
    return (*solution[:cut], other, *solution[cut + 1 :])


class WebSynthesizer(Synthesizer):
    """Reverse task synthesis for MiniWoB++ form pages (env ``miniwob:TASK[,TASK...]``).

    Raises:
        ConfigError: a task the miniwob package lacks, or one whose page is no form.
    """

    def __init__(self, env: str) -> None:
        if not env.startswith(PREFIX):
            raise ConfigError(f"env {env!r}: web tasks are synthesized for {PREFIX}TASK envs")
        names = MiniWoB(tuple(t.strip() for t in env.removeprefix(PREFIX).split(","))).names
        others = [n for n in names if n not in SYNTH_TASKS]
        if others:
            raise ConfigError(
                f"env {env!r}: web tasks are synthesized from the MiniWoB++ form pages "
                f"({', '.join(SYNTH_TASKS)}), not {', '.join(others)}"
            )
        self.env = PREFIX + ",".join(names)

    def start_tasks(self, n: int, seed: int) -> list[Task]:
        tasks = get_env(self.env).tasks(n, seed=seed, split="train")
        return [t.model_copy(update={"data": {**t.data, RECORD_STATE: True}}) for t in tasks]

    def explorer(self, seed: int) -> ExpertFn:
        def explore(task: Task, messages: list[Message]) -> str | None:
            actions = walk(opening(messages)[1], turn_rng(seed, "walk", task, 0))
            turn = sum(1 for m in messages if m.role is Role.ASSISTANT)
            return format_tool_call(*actions[turn]) if turn < len(actions) else DONE

        return explore

    def relabel(self, source: Trajectory, min_steps: int) -> Candidate | str:
        if source.outcome.status is not OutcomeStatus.OK:
            return f"the exploration episode ended {source.outcome.status}"
        if PAGE_STATE not in source.metadata:
            return "the exploration recorded no page state"
        state = PageState.model_validate(source.metadata[PAGE_STATE])
        steps = len(state.changed()) + len(state.pressed)
        if steps == 0:
            return "the page state did not change"
        if steps < min_steps:
            return f"too easy: fewer than {min_steps} changes"
        page = {"task": source.task.data["task"], "seed": source.task.data["seed"]}
        check = PageCheck.of(state).model_dump(mode="json")
        task = new_task(self.env, source, instruction(state), data={**page, CHECK: check})
        solution = [_reply(m) for m in source.messages if m.role is Role.ASSISTANT]
        wrong = wrong_replies(solution, source, state, elements(opening(source.messages)[1]))
        if wrong is None:
            return "no wrong answer changes the page state"
        return Candidate(task, tuple(solution), wrong)
