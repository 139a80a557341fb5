"""Confined runs: a model that asks its harness to read the user's keys, write outside its
workspace, reach another host and fork without end gets every attempt refused, while the run
is recorded as it went and leaves nothing behind."""

from __future__ import annotations

import json
import socket
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from serve_helpers import MODEL
from typer.testing import CliRunner

from trajforge.agent_programs import AgentRunner, Confinement
from trajforge.cli.main import app
from trajforge.envs.sandbox import sandbox_available
from trajforge.formats.tool_calls import format_tool_call
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.rollout import Limits, RolloutSpec, run_rollout
from trajforge.schema import Message, OutcomeStatus, Role, Task
from trajforge.serve.gateway import Gateway
from trajforge.store import TrajectoryStore

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap cannot run here")

AGENT = f"python {Path(__file__).parent / 'shell_agent.py'}"
KEY = "-----BEGIN OPENSSH PRIVATE KEY----- trajforge-test-secret"
TOKEN = "sk-trajforge-test-token"
PROCESSES = 48


@pytest.fixture
def listener() -> Iterator[tuple[int, list[object]]]:
    """A second server on another port of 127.0.0.1: the host no run may reach; yields its
    port and the connections it accepted."""
    accepted: list[object] = []
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()


def attacks(home: Path, outside: Path, runs: Path, port: int, marker: str) -> list[str]:
    fork_forever = (
        "import os, time\n"
        "n = 0\n"
        "while True:\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError as exc:\n"
        "        print('refused after', n, 'forks:', exc.strerror, flush=True)\n"
        "        break\n"
        "    if pid == 0:\n"
        "        os.close(1); os.close(2); time.sleep(120); os._exit(0)\n"
        "    n += 1\n"
        f"# {marker}"
    )
    return [
        f"cat ~/.ssh/id_ed25519 {home}/.ssh/id_ed25519; ls -a ~",
        "env",
        f"echo pwned > {outside}/pwned.txt; ls {runs}; echo mine > mine.txt && cat mine.txt",
        f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo reached; exec 4<>/dev/tcp/1.1.1.1/80 && echo out",
        f'python3 -c "{fork_forever}"',
    ]


def attacker(commands: list[str]) -> Callable[[Task | None, list[Message]], str]:
    def reply(task: Task | None, messages: list[Message]) -> str:
        done = sum(m.role is Role.TOOL for m in messages)
        if done < len(commands):
            return format_tool_call("bash", {"command": commands[done]})
        return "Every attempt made."

    return reply


def test_every_attack_is_contained_and_the_run_recorded(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    listener: tuple[int, list[object]],
    processes_with: Callable[[str], list[int]],
) -> None:
    tokenizer = load_tokenizer()  # before HOME moves: its cache is under the user's home
    home, outside, runs = tmp_path / "home", tmp_path / "outside", tmp_path / "runs"
    for folder in (home / ".ssh", outside, runs):
        folder.mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(KEY)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ANTHROPIC_API_KEY", TOKEN)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setattr(tempfile, "tempdir", str(runs))
    port, accepted = listener
    marker = f"trajforge-test-{uuid.uuid4().hex}"
    commands = attacks(home, outside, runs, port, marker)
    policy = ScriptedPolicy(attacker(commands), tokenizer, name=MODEL)
    spec = RolloutSpec(
        tasks=[Task(id="attack", prompt="Try everything.")],
        n=2,
        limits=Limits(episode_timeout_s=60),
        concurrency=2,
        run_id="confined",
        store=tmp_path / "runs.db",
    )
    runner = AgentRunner(
        AGENT,
        gateway=Gateway(policy, None, run_id=""),
        confine=Confinement(max_processes=PROCESSES),
    )
    trajectories = run_rollout(spec, runner=runner)

    assert len(trajectories) == 2
    for traj in trajectories:
        assert traj.outcome.status is OutcomeStatus.OK, traj.outcome
        results = [str(m.content) for m in traj.messages if m.role is Role.TOOL]
        assert len(results) == len(commands) and traj.messages[-1].content == "Every attempt made."
        keys, env, files, network, forks = results
        assert "No such file" in keys and "trajforge-test-secret" not in keys
        assert "HOME=/home/agent" in env and "OPENAI_API_KEY=trajforge" in env
        assert TOKEN not in env and "GITHUB_TOKEN" not in env and str(home) not in env
        assert f"cannot access '{runs}'" in files and files.startswith("exit 0\nmine\n")
        assert "Connection refused" in network and "Network is unreachable" in network
        assert "reached" not in network and "out" not in network.split()
        refused = forks.split("refused after ")[1]
        assert int(refused.split()[0]) < PROCESSES and "Resource temporarily unavailable" in forks
    assert not (outside / "pwned.txt").exists()
    assert accepted == []
    assert processes_with(marker) == []
    assert list(runs.iterdir()) == [], "every run's folder is removed"


def test_collect_confines_its_runs_and_records_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    tasks_file = tmp_path / "tasks.jsonl"
    task = Task(
        id="t1", prompt="Add 1 and 2 and 3?", answer=6, data={"reward": "print", "max_tokens": 8}
    )
    tasks_file.write_text(task.model_dump_json() + "\n")
    store = tmp_path / "c.db"
    agent = f"python {Path(__file__).parent / 'agent_program.py'}"
    args = ["collect", "--agent", agent, "--tasks-file", str(tasks_file), "--confine"]
    args += ["--model", "tiny", "--run", "col", "--store", str(store), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    # The tiny model's nonsense reaches the program's 8-token cap (a stop token among 8 draws is
    # too rare to meet on any CPU); the confined program still printed its reward through its
    # own stdout.
    assert summary["runs"] == 1 and summary["status"]["truncated"] == 1
    assert summary["reward_mean"] == 0.0
    with TrajectoryStore(store) as db:
        meta = db.get_run("col")
    assert meta is not None and meta["confine"]["max_processes"] == Confinement().max_processes
    assert meta["agent"] == agent and meta["harness"] is None
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("trajforge-run-")] == []


def test_a_confined_run_killed_at_its_timeout_leaves_nothing(
    gateway: Gateway,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    processes_with: Callable[[str], list[int]],
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    marker = f"trajforge-test-{uuid.uuid4().hex}"
    spec = RolloutSpec(
        tasks=[Task(id="hang", prompt="Wait.", data={"hang": marker})],
        limits=Limits(episode_timeout_s=3),
    )
    agent = f"python {Path(__file__).parent / 'agent_program.py'}"
    (traj,) = run_rollout(spec, runner=AgentRunner(agent, gateway=gateway, confine=Confinement()))
    assert traj.outcome.status is OutcomeStatus.TIMEOUT
    assert processes_with(marker) == []
    assert list(tmp_path.iterdir()) == []
