"""The example Harbor task folders load with harbor's own ``Task`` (harbor 0.26.0 in its side
environment), and trajforge reads the same task name and instruction from them."""

from __future__ import annotations

import json
from pathlib import Path

from harbor_side import needs_harbor, run_harbor
from trajforge.envs.harbor import read_task

TASKS = Path(__file__).resolve().parents[2] / "examples" / "harbor_tasks"

LOAD = """
import json, sys
from harbor.models.task.task import Task
for folder in sys.argv[1:]:
    task = Task(folder)
    print(json.dumps({"valid": Task.is_valid_dir(folder), "name": task.name,
                      "instruction": task.instruction}))
"""


@needs_harbor
def test_the_example_tasks_are_tasks_to_harbor_as_to_trajforge() -> None:
    folders = sorted(p for p in TASKS.iterdir() if p.is_dir())
    assert len(folders) == 2
    loaded = [json.loads(line) for line in run_harbor(LOAD, *map(str, folders)).splitlines()]
    for folder, theirs in zip(folders, loaded, strict=True):
        ours = read_task(folder)
        assert theirs["valid"] is True
        assert theirs["name"] == ours.name
        assert theirs["instruction"].strip() == ours.instruction
