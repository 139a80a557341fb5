"""Which experiment stage made a run, from the run folder's ``results.json``.

An experiment names each stage's runs ``<experiment>.<stage>`` (``.<attempt>`` for an attempt
after the first, ``.step<N>`` for an RL stage's steps), so a run's stage, and with it its kind
(eval, demonstrations, rl...), is known even where the run's own metadata does not say it.
"""

from __future__ import annotations

import json
from pathlib import Path

from trajforge.report.html import RESULTS_FILE


def stage_kinds(run_dir: Path | None) -> dict[str, str]:
    """Each stage's kind by the run id its runs start with (``{}``: no experiment's results)."""
    path = None if run_dir is None else run_dir / RESULTS_FILE
    if path is None or not path.is_file():
        return {}
    try:
        results = json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}  # being rewritten, or not ours: the runs keep what their metadata says
    name = results.get("name") if isinstance(results, dict) else None
    stages = results.get("stages") if isinstance(results, dict) else None
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
