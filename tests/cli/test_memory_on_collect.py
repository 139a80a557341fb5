"""``trajforge collect --memory``: an agent program's own prompt gets the memory's lessons for
its task in the system message, the run keeps its memory plan, and ``--memory-update`` learns
from every finished run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from test_memory_cmds import ENV, built_memory

from cli_runner import RunCli
from trajforge.memory.items import read_memory
from trajforge.memory.live import HEADER, MEMORY_KEY
from trajforge.schema import Role
from trajforge.store import TrajectoryStore

PROGRAM = """
import json, os, sys, urllib.request
task = json.loads(sys.stdin.read())
body = {"model": os.environ["TRAJFORGE_MODEL"], "max_tokens": 3, "messages": [
    {"role": "system", "content": "You are my agent."},
    {"role": "user", "content": task["prompt"]}]}
request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
urllib.request.urlopen(request, timeout=60).read()
"""


def test_collect_tells_each_run_its_lessons(run_cli: RunCli, tmp_path: Path) -> None:
    store, memory = built_memory(run_cli, tmp_path)
    program = tmp_path / "agent.py"
    program.write_text(PROGRAM)
    args = ["--agent", f"{sys.executable} {program}", "--model", "tiny", "--tasks", "2"]
    code, out, err = run_cli(
        "collect", *ENV, *args, "--run", "c", "--memory", memory, "--memory-k", "2",
        "--memory-update", "--store", store, "--json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["runs"] == 2
    items = {i.id for i in read_memory(memory)}
    with TrajectoryStore(store) as db:
        collected = db.query(run="c")
        meta = db.get_run("c")
    assert meta is not None and meta["memory"]["k"] == 2 and meta["memory"]["update"]
    assert len(collected) == 2
    for traj in collected:
        record = traj.metadata[MEMORY_KEY]
        assert 1 <= len(record["items"]) <= 2 and {i["id"] for i in record["items"]} <= items
        system = traj.messages[0]
        assert system.role is Role.SYSTEM
        assert system.content.startswith(f"You are my agent.\n\n{HEADER}\n1. ")
        assert traj.messages[1].role is Role.USER
    assert len(items) == 3 + 2  # each finished run was distilled into one more item
    code, _, err = run_cli(
        "collect", *ENV, *args, "--run", "e", "--memory", memory, "--memory-embed", "tiny",
        "--store", store,
    )  # fmt: skip
    assert code == 0, err
    with TrajectoryStore(store) as db:
        embedded = db.query(run="e")
    assert {t.metadata[MEMORY_KEY]["retriever"] for t in embedded} == {"embedding:tiny"}
    assert all(len(t.metadata[MEMORY_KEY]["items"]) == 3 for t in embedded)


def test_collect_memory_needs_an_env(run_cli: RunCli, tmp_path: Path) -> None:
    tasks, memory = tmp_path / "tasks.jsonl", tmp_path / "mem.jsonl"
    tasks.write_text(json.dumps({"id": "a", "prompt": "hi"}) + "\n")
    memory.write_text("")
    code, _, err = run_cli(
        "collect", "--tasks-file", tasks, "--agent", "python x.py", "--memory", memory,
        "--store", tmp_path / "s.db",
    )  # fmt: skip
    assert code != 0 and "--memory: give --env" in err
    assert len(err.strip().splitlines()) == 1
