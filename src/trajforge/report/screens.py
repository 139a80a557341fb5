"""The report's screens section: a held-out episode that the last training stage turned from a
failure into a success, shown as the screens its environment recorded (a browser env's
``record_screens``: PNG data URLs in each trajectory's ``metadata.screens``)."""

from __future__ import annotations

from typing import Any

from trajforge.schema import Trajectory, is_success

SCREENS_KEY = "screens"
# Only images go into an <img src>: a data URL of another type is left out.
_IMAGE_URL = "data:image/"


def screens_of(t: Trajectory) -> list[str]:
    """The screen data URLs ``t`` recorded (none when its env recorded none)."""
    found = t.metadata.get(SCREENS_KEY)
    if not isinstance(found, list):
        return []
    return [s for s in found if isinstance(s, str) and s.startswith(_IMAGE_URL)]


def _solved(t: Trajectory) -> bool:
    return is_success(t.outcome.status, t.outcome.reward)


def rescued_episode(stages: list[tuple[str, list[Trajectory]]]) -> dict[str, Any] | None:
    """The first held-out task (by id: the same page seed) that failed at the next-to-last eval
    stage and succeeded at the last, both with screens recorded; ``None`` if there is none."""
    shown = [(name, trajs) for name, trajs in stages if trajs]
    if len(shown) < 2:
        return None
    (before_name, before), (after_name, after) = shown[-2:]
    after_by_id = {t.task.id: t for t in after}
    for old in sorted(before, key=lambda t: t.task.id):
        new = after_by_id.get(old.task.id)
        if new is None or _solved(old) or not _solved(new):
            continue
        if not screens_of(old) or not screens_of(new):
            continue
        return {
            "task_id": old.task.id,
            "prompt": old.task.prompt,
            "sides": [
                {"stage": name, "solved": _solved(t), "screens": screens_of(t)}
                for name, t in ((before_name, old), (after_name, new))
            ],
        }
    return None
