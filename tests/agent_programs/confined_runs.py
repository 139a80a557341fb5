"""What the confined-run tests of an experiment's collect stage and of RL share: the test agent
program, tasks whose reward says the run was confined, the run metadata they must record."""

from __future__ import annotations

from pathlib import Path

from trajforge.agent_programs import Confinement
from trajforge.agent_programs.confine import HOME
from trajforge.schema import Task

# Standard library only, so the system's python runs it inside the sandbox.
AGENT = f"python {Path(__file__).parent / 'agent_program.py'}"


def confined_tasks(tmp_path: Path, count: int) -> Path:
    """A task file of ``count`` tasks whose runs print reward 1 where ``$HOME`` is the
    sandbox's (a confined run) and reply in 8 tokens at most."""
    path = tmp_path / "tasks.jsonl"
    data = {"reward": "print", "max_tokens": 8, "home": HOME}
    tasks = [Task(id=f"t{k}", env="calculator", prompt=f"Add {k} and 1?", answer=k + 1,
                  data=data) for k in range(count)]  # fmt: skip
    path.write_text("".join(t.model_dump_json() + "\n" for t in tasks))
    return path


def assert_confined_metadata(meta: dict[str, object] | None) -> None:
    assert meta is not None and meta["agent"] == AGENT and meta["harness"] is None
    confine = meta["confine"]
    assert isinstance(confine, dict) and confine == Confinement().model_dump(mode="json")
