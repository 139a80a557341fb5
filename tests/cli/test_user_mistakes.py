"""Thirty-odd mistakes a user makes across commands (wrong names, missing files, busy ports,
wrong formats, bad ids, unreachable servers), each answered as a user needs: a non-zero exit,
one line naming the thing that is wrong, nothing created, no traceback."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_runner import RunCli
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore

BUSY = "{busy}"
CLOSED = "{closed}"
AGENT = "python agent.py"

# (command line, what the one line must name); {busy}: a port a server holds, {closed}: a
# port nothing listens on. The folder holds existing.db (one run, "r1"), chat.jsonl (OpenAI
# chat records), broken.jsonl (bad JSON), odd.jsonl (records of no format) and empty.jsonl.
MISTAKES: list[tuple[str, list[str], str]] = [
    ("ls a missing store", ["ls", "--store", "missing.db"], "missing.db"),
    ("show an unknown id", ["show", "nothere", "--store", "existing.db"], "nothere"),
    ("stats of a missing store", ["stats", "--store", "missing.db"], "missing.db"),
    ("export from a missing store", ["export", "--out", "out.jsonl", "--store", "missing.db"],
     "missing.db"),
    ("export a read-only format", ["export", "--out", "out.jsonl", "--format", "inspect",
     "--store", "existing.db"], "--format inspect"),
    ("export a misspelt format", ["export", "--out", "out.jsonl", "--format", "sharegtp",
     "--store", "existing.db"], "'sharegtp'"),
    ("export an unknown run", ["export", "--out", "out.jsonl", "--run", "nothere", "--store",
     "existing.db"], "nothere"),
    ("import a missing file", ["import", "missing.jsonl", "--store", "new.db"], "missing.jsonl"),
    ("import with the wrong format", ["import", "chat.jsonl", "--format", "trajforge", "--store",
     "new.db"], "--format openai"),
    ("import a misspelt format", ["import", "chat.jsonl", "--format", "opena", "--store",
     "new.db"], "'opena'"),
    ("import broken JSON", ["import", "broken.jsonl", "--store", "new.db"], "broken.jsonl:1:15"),
    ("import an empty file", ["import", "empty.jsonl", "--store", "new.db"], "empty.jsonl"),
    ("import records of no format", ["import", "odd.jsonl", "--store", "new.db"], "--format"),
    ("import an export-only format", ["import", "chat.jsonl", "--format", "trl-preference",
     "--store", "new.db"], "trl-preference"),
    ("rollout an unknown env", ["rollout", "--env", "nosuch", "--store", "new.db"], "nosuch"),
    ("eval an unknown env", ["eval", "--env", "nosuch", "--store", "new.db"], "nosuch"),
    ("rollout an unknown model", ["rollout", "--model", "nosuch-model", "--store", "new.db"],
     "nosuch-model"),
    ("serve an unknown model", ["serve", "--model", "nosuch-model", "--port", "0", "--store",
     "new.db"], "nosuch-model"),
    ("collect with an unknown model", ["collect", "--agent", AGENT, "--env", "calculator",
     "--model", "nosuch-model", "--store", "new.db"], "nosuch-model"),
    ("rollout no tasks", ["rollout", "--tasks", "0", "--store", "new.db"], "--tasks"),
    ("eval an unknown scorer", ["eval", "--scorer", "nosuch_scorer", "--store", "new.db"],
     "nosuch_scorer"),
    ("resume in a missing store", ["rollout", "--resume", "r1", "--store", "missing.db"],
     "missing.db"),
    ("resume an unknown run", ["rollout", "--resume", "nothere", "--store", "existing.db"],
     "nothere"),
    ("serve on a busy port", ["serve", "--port", BUSY, "--store", "new.db"], f"--port {BUSY}"),
    ("view on a busy port", ["view", "--port", BUSY, "--store", "existing.db"], f"--port {BUSY}"),
    ("mcp serve on a busy port", ["mcp", "serve", "calculator", "--http", BUSY],
     f"--http {BUSY}"),
    ("otel-receive on a busy port", ["otel-receive", "--port", BUSY, "--store", "new.db"],
     f"--port {BUSY}"),
    ("view a missing run folder", ["view", "nothere_dir"], "nothere_dir"),
    ("view a missing store", ["view", "--store", "missing.db"], "missing.db"),
    ("judge an unknown run", ["judge", "nothere", "--scorer", "process", "--store",
     "existing.db"], "nothere"),
    ("judge-eval missing labels", ["judge-eval", "--labels", "labels.jsonl", "--store",
     "existing.db"], "labels.jsonl"),
    ("collect from an unknown env", ["collect", "--agent", AGENT, "--env", "nosuch", "--store",
     "new.db"], "nosuch"),
    ("collect without tasks", ["collect", "--agent", AGENT, "--store", "new.db"], "--env"),
    ("collect a missing tasks file", ["collect", "--agent", AGENT, "--tasks-file", "tasks.jsonl",
     "--store", "new.db"], "tasks.jsonl"),
    ("check a missing store", ["check", "--store", "missing.db"], "missing.db"),
    ("call an unknown tool", ["tool", "calculator", "abacus"], "abacus"),
    ("list an unknown env", ["envs", "--env", "nosuch"], "nosuch"),
    ("train from a missing config", ["train", "sft", "--config", "missing.yaml"], "missing.yaml"),
    ("run a missing experiment", ["run", "missing.yaml"], "missing.yaml"),
    ("rollout on an unreachable server", ["rollout", "--model", f"openai:http://127.0.0.1:{CLOSED}#m",
     "--store", "new.db"], f"127.0.0.1:{CLOSED}"),
    ("judge with an unreachable judge", ["judge", "r1", "--judge-model",
     f"openai:http://127.0.0.1:{CLOSED}#m", "--store", "existing.db"], "--judge-model"),
    ("serve an unreachable upstream", ["serve", "--model", f"openai:http://127.0.0.1:{CLOSED}#m",
     "--port", "0", "--store", "new.db"], f"127.0.0.1:{CLOSED}"),
]  # fmt: skip


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    }


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's folder with a store and a few data files, as the working directory (where the
    default store, runs/trajforge.db, would be made)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRAJFORGE_STORE", raising=False)
    with TrajectoryStore(tmp_path / "existing.db") as db:
        db.add_many([synthetic_trajectory(0).model_copy(update={"run_id": "r1"})])
    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    (tmp_path / "chat.jsonl").write_text(json.dumps(chat) + "\n")
    (tmp_path / "broken.jsonl").write_text('{"messages": [}\n')
    (tmp_path / "odd.jsonl").write_text('{"question": "q", "answer": "a"}\n')
    (tmp_path / "empty.jsonl").write_text("")
    return tmp_path


@pytest.fixture
def ports() -> Iterator[dict[str, int]]:
    with socket.socket() as busy, socket.socket() as closed:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        closed.bind(("127.0.0.1", 0))
        yield {"busy": busy.getsockname()[1], "closed": closed.getsockname()[1]}


def test_there_are_thirty_mistakes_or_more() -> None:
    assert len(MISTAKES) >= 30
    assert len({name for name, _, _ in MISTAKES}) == len(MISTAKES)


@pytest.mark.parametrize(("args", "names"), [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES])
def test_a_mistake_is_one_line_naming_it_and_creates_nothing(
    run_cli: RunCli, folder: Path, ports: dict[str, int], args: list[str], names: str
) -> None:
    before = _snapshot(folder)
    code, out, err = run_cli(*(a.format(**ports) for a in args))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0, (out, err)
    assert "Traceback" not in err + out
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and names.format(**ports) in lines[0], lines[0]
    assert _snapshot(folder) == before
