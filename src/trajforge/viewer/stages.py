"""Which experiment stage made a run, from the run folder's ``results.json``.

An experiment names each stage's runs ``<experiment>.<stage>`` (``.<attempt>`` for an attempt
after the first, ``.step<N>`` for an RL stage's steps), so a run's stage, and with it its kind
(eval, demonstrations, rl...), is known even where the run's own metadata does not say it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trajforge.report import RESULTS_FILE


def _results(run_dir: Path | None) -> dict[str, Any]:
    """The run folder's ``results.json`` (``{}``: none, or not an object)."""
    path = None if run_dir is None else run_dir / RESULTS_FILE
    if path is None or not path.is_file():
        return {}
    try:
        results = json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}  # being rewritten, or not ours: the runs keep what their metadata says
    return results if isinstance(results, dict) else {}


def stage_kinds(run_dir: Path | None) -> dict[str, str]:
    """Each stage's kind by the run id its runs start with (``{}``: no experiment's results)."""
    results = _results(run_dir)
    name, stages = results.get("name"), results.get("stages")
    if not isinstance(name, str) or not isinstance(stages, list):
        return {}
    return {
        f"{name}.{s['name']}": str(s["kind"])
        for s in stages
        if isinstance(s, dict) and isinstance(s.get("name"), str) and s.get("kind")
    }


def kind_of(run_id: str, kinds: dict[str, str]) -> str | None:
    """The kind of the stage whose runs ``run_id`` is one of (the longest prefix wins)."""
    found = [p for p in kinds if run_id == p or run_id.startswith(p + ".")]
    return kinds[max(found, key=len)] if found else None


def is_current_attempt(run_id: str, stage: str, run_dir: Path | None) -> bool:
    """Whether run ``run_id`` of stage ``stage`` (``<name>.<stage>[.<attempt>]...``) is of the
    stage's current attempt, whose folder is ``<stage>/`` (an earlier one's curves are not)."""
    attempts = _attempts(run_dir)
    if stage not in attempts:
        return True  # no experiment's results say otherwise
    parts = run_id.split(".")[1:]
    if stage not in parts:
        return True
    last = len(parts) - 1 - parts[::-1].index(stage)
    after = parts[last + 1 :]
    attempt = int(after[0]) if after and after[0].isdigit() else 0
    return attempt == attempts[stage]


def _attempts(run_dir: Path | None) -> dict[str, int]:
    """Each stage's current attempt, from the run folder's ``results.json``."""
    stages = _results(run_dir).get("stages")
    if not isinstance(stages, list):
        return {}
    return {
        s["name"]: int(s.get("attempt", 0))
        for s in stages
        if isinstance(s, dict) and isinstance(s.get("name"), str)
    }
