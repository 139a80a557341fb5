"""A MiniWoB++ page's state, recorded and checked: what web task synthesis (OS-Genesis,
Explorer) turns into tasks.

The state is the form's fields in page order (kind, label, value, the value the page started
with and the element id the agent saw) and the buttons pressed, in order. A click listener in
the capture phase sees every press before the page's own handler ends its episode; the fields
keep their values after that (MiniWoB only covers the page). A task recorded this way
(``data["record_state"]``) leaves the state it reached in its trajectory's metadata
(``page_state``); a task with ``data["check"]`` (a ``PageCheck``) is judged by it instead of
by the benchmark: reward 1 when every field holds the checked value and the checked buttons
were pressed, else 0, once the page ends its episode or the agent calls ``done``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from trajforge.envs.browser.axtree import BID_ATTRIBUTE
from trajforge.envs.browser.benchmark import Episode, EpisodeStatus
from trajforge.envs.browser.session import PageSession
from trajforge.schema import Task

RECORD_STATE = "record_state"
"""``Task.data`` key: the episode records the page state it reached."""
CHECK = "check"
"""``Task.data`` key: the ``PageCheck`` that judges the episode."""
PAGE_STATE = "page_state"
"""Trajectory metadata key of the recorded state."""
CHOICE_KINDS = frozenset({"checkbox", "radio"})
TEXT_KINDS = frozenset({"text", "password", "textarea", "email", "search", "number", "tel", "url"})

# The fields reader (kept on the window, so the state reader uses the same one), the values the
# page starts with, and the press recorder.
_RECORD_JS = """
([bidAttr, kinds]) => {
  window.__tf_fields = () => {
    const root = document.getElementById('area') || document.body;
    const found = [];
    for (const el of root.querySelectorAll('input, textarea, select')) {
      const kind = el.tagName === 'SELECT' ? 'select'
        : el.tagName === 'TEXTAREA' ? 'textarea' : (el.type || 'text');
      if (!kinds.includes(kind)) { continue; }
      let label = '';
      if (el.labels && el.labels.length) {
        label = el.labels[0].textContent.trim();
      } else if (el.previousElementSibling && el.previousElementSibling.tagName === 'LABEL') {
        label = el.previousElementSibling.textContent.trim();
      }
      const value = (kind === 'checkbox' || kind === 'radio') ? el.checked
        : kind === 'select' ? (el.selectedIndex >= 0 ? el.options[el.selectedIndex].text : '')
        : el.value;
      found.push({kind, label, value, element: el.getAttribute(bidAttr)});
    }
    return found;
  };
  window.__tf_initial = window.__tf_fields().map((f) => f.value);
  window.__tf_pressed = [];
  document.addEventListener('click', (event) => {
    const button = event.target.closest('button, input[type=button], input[type=submit]');
    if (button) { window.__tf_pressed.push((button.textContent || button.value || '').trim()); }
  }, true);
}
"""
_STATE_JS = """
() => ({
  fields: window.__tf_fields().map((f, i) => ({...f, initial: window.__tf_initial[i]})),
  pressed: window.__tf_pressed,
})
"""


class PageField(BaseModel):
    """One form field of the page as the episode left it."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    """``text``, ``password``, ``textarea``, ``checkbox``, ``radio`` or ``select``."""
    label: str = ""
    value: str | bool
    """Its text (a select: the chosen option's), or whether it is ticked."""
    initial: str | bool | None = None
    """Its value when the episode started."""
    element: str | None = None
    """The element id the agent sees in the page tree."""


class PageState(BaseModel):
    """The fields in page order and the buttons pressed in order."""

    model_config = ConfigDict(extra="forbid")

    fields: list[PageField]
    pressed: list[str]

    def changed(self) -> list[PageField]:
        return [f for f in self.fields if f.value != f.initial]


class PageCheck(BaseModel):
    """What a synthesized task's page must reach: every field's value in page order (untouched
    ones included) and the buttons pressed, in order."""

    model_config = ConfigDict(extra="forbid")

    values: list[str | bool]
    pressed: list[str]

    @classmethod
    def of(cls, state: PageState) -> PageCheck:
        return cls(values=[f.value for f in state.fields], pressed=state.pressed)

    def mismatch(self, state: PageState) -> str | None:
        """Where ``state`` differs from the checked one (``None``: it does not)."""
        if len(state.fields) != len(self.values):
            return f"the page has {len(state.fields)} fields, the task {len(self.values)}"
        for k, (field, want) in enumerate(zip(state.fields, self.values, strict=True), start=1):
            if field.value != want:
                return f"field {k} ({field.kind} {field.label!r}) is {field.value!r}, not {want!r}"
        if state.pressed != self.pressed:
            return f"pressed {state.pressed}, not {self.pressed}"
        return None


def read_state(session: PageSession) -> PageState:
    """The page's state (the recorder must be installed)."""
    return PageState.model_validate(session.page.evaluate(_STATE_JS))


class StateEpisode(Episode):
    """A benchmark episode whose page state is recorded and, with a ``check``, judged by it.

    Args:
        inner: The benchmark's own episode (it says when the page ended its episode).
        goal: The instruction (a synthesized task's own, or the benchmark's).
        check: The state to reach (``None``: the benchmark's reward, the state only recorded).
    """

    def __init__(self, inner: Episode, goal: str, check: PageCheck | None) -> None:
        self.inner = inner
        self.goal = goal
        self.check = check

    def _judged(self, session: PageSession) -> EpisodeStatus:
        state = read_state(session)
        self.reached = state.model_dump(mode="json")
        assert self.check is not None
        why = self.check.mismatch(state)
        return EpisodeStatus(True, 0.0 if why else 1.0, why or "the page reached the task's state")

    def status(self, session: PageSession) -> EpisodeStatus:
        own = self.inner.status(session)
        if self.check is None:
            self.reached = read_state(session).model_dump(mode="json")
            return own
        if not own.done:
            return EpisodeStatus(False, 0.0)
        return self._judged(session)

    def final(self, session: PageSession) -> EpisodeStatus:
        return self.status(session) if self.check is None else self._judged(session)


def recorded(session: PageSession, task: Task, episode: Episode) -> Episode:
    """``episode`` itself, or, for a task that records or checks its page state, the episode
    wrapped to do so (the recorder installed on the started page)."""
    data: dict[str, Any] = task.data
    if CHECK not in data and not data.get(RECORD_STATE):
        return episode
    session.page.evaluate(
        _RECORD_JS, [BID_ATTRIBUTE, sorted({*TEXT_KINDS, *CHOICE_KINDS, "select"})]
    )
    check = PageCheck.model_validate(data[CHECK]) if CHECK in data else None
    return StateEpisode(episode, task.prompt if check is not None else episode.goal, check)
