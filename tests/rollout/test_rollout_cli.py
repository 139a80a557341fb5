"""``trajforge rollout``: a run, its JSON summary, refusing to reuse a run name, --resume, option
errors that name the option, unscored episodes, --precision, and Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from trajforge.cli.failures import ExitCode
from trajforge.cli.main import app
from trajforge.errors import ConfigError
from trajforge.rollout import RolloutSpec
from trajforge.schema import Trajectory
from trajforge.store.sqlite import TrajectoryStore

DOUBLES = Path(__file__).parent
ENV_FILE = """
import sys
sys.path.insert(0, {doubles!r})
from rollout_doubles import TurnsEnv, make_tasks
from trajforge.formats.tool_calls import format_tool_call

class Turns:
    name = "turns"
    def make(self):
        return TurnsEnv(2, faults={faults!r}, delay=lambda task, turn: {delay!r})
    def tasks(self, n, seed=0, split="train"):
        return make_tasks(n)
    def expert(self, task, messages):
        return format_tool_call("echo", {{"x": 1}})

def factory():
    return Turns()
"""


def env_file(tmp_path: Path, faults: dict[str, str] | None = None, delay: float = 0.0) -> str:
    """A user env of two-step episodes (reward 1.0) whose tasks in ``faults`` crash."""
    path = tmp_path / "turns_env.py"
    path.write_text(ENV_FILE.format(doubles=str(DOUBLES), faults=faults or {}, delay=delay))
    return f"{path}:factory"


def invoke(*args: str, exit_code: int = 0) -> dict[str, object]:
    result = CliRunner().invoke(app, ["rollout", *args], catch_exceptions=False)
    assert result.exit_code == exit_code, result.output
    return dict(json.loads(result.stdout))


def test_rollout_command_runs_stores_and_resumes(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    common = ["--store", str(db), "--json"]
    args = ["--env", "calculator", "--model", "expert", "--tasks", "3", "--n", "2"]
    summary = invoke(*args, "--run", "calc-run", *common)
    assert summary["run_id"] == "calc-run" and summary["episodes"] == 6 and summary["stored"] == 6
    assert summary["statuses"] == {"ok": 6, "truncated": 0, "error": 0, "timeout": 0}
    assert (summary["reward_mean"], summary["success"], summary["scored"]) == (1.0, 1.0, 6)

    with pytest.raises(ConfigError, match="already exists"):
        CliRunner().invoke(app, ["rollout", "--run", "calc-run", *common], catch_exceptions=False)

    # Widen the stored run to 5 tasks: a resume (by a prefix of the id) runs the 4 missing.
    with TrajectoryStore(db) as store:
        meta = store.get_run("calc-run")
        assert meta is not None and meta["command"] == "rollout"
        # The run's metadata is the spec it ran, options and run id included.
        spec = RolloutSpec.model_validate(meta["spec"])
        assert (spec.env, spec.policy and spec.policy.name, spec.run_id) == (
            "calculator",
            "expert",
            "calc-run",
        )
        assert (spec.episodes, spec.n, spec.sampling.temperature, spec.sampling.max_new_tokens) == (
            6,
            2,
            1.0,
            256,
        )
        meta["spec"]["tasks"]["count"] = 5
        store.set_run("calc-run", meta)
    resumed = invoke("--resume", "calc", *common)
    assert resumed["run_id"] == "calc-run"
    assert resumed["resumed_from"] == 6 and resumed["episodes"] == 4 and resumed["stored"] == 10
    assert resumed["scored"] == 10  # the reward figures cover the whole stored run
    with TrajectoryStore(db) as store:
        keys = [(t.task.id, t.sample_index) for t in store.query(run="calc-run")]
    assert len(keys) == len(set(keys)) == 10

    again = invoke("--resume", "calc-run", *common)
    assert again["episodes"] == 0 and again["stored"] == 10


def test_a_resumed_run_refuses_options_that_would_change_it(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    invoke("--model", "expert", "--tasks", "1", "--run", "r", "--store", db, "--json")
    with pytest.raises(ConfigError, match=r"^--tasks: a resumed run keeps the settings"):
        CliRunner().invoke(
            app, ["rollout", "--resume", "r", "--tasks", "3", "--store", db], catch_exceptions=False
        )
    with pytest.raises(ConfigError, match=r"^--resume: no run starting with 'x'"):
        CliRunner().invoke(app, ["rollout", "--resume", "x", "--store", db], catch_exceptions=False)
    missing = str(tmp_path / "missing.db")
    with pytest.raises(ConfigError, match=r"^--resume: no store at"):
        CliRunner().invoke(
            app, ["rollout", "--resume", "r", "--store", missing], catch_exceptions=False
        )
    assert not Path(missing).exists()


def test_a_run_without_a_name_says_its_id_at_the_start(tmp_path: Path) -> None:
    args = ["rollout", "--model", "expert", "--tasks", "1", "--store", str(tmp_path / "s.db")]
    result = CliRunner().invoke(app, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    run_id = json.loads(result.stdout)["run_id"]
    assert result.stderr.startswith(f"run id: {run_id}\n")


OUT_OF_RANGE = [
    ("--tasks", "0", "--tasks: must be at least 1, got 0"),
    ("--n", "-2", "--n: must be at least 1, got -2"),
    ("--max-new-tokens", "0", "--max-new-tokens: must be at least 1, got 0"),
    ("--max-turns", "0", "--max-turns: must be at least 1, got 0"),
    ("--concurrency", "0", "--concurrency: must be at least 1, got 0"),
    ("--temperature", "-0.5", "--temperature: must be at least 0, got -0.5"),
    ("--split", "dev", "--split: must be 'train' or 'test', got 'dev'"),
]


@pytest.mark.parametrize(
    ("command", "option", "value", "message"),
    [
        *((command, *case) for command in ("rollout", "eval") for case in OUT_OF_RANGE),
        ("rollout", "--tool-timeout", "0", "--tool-timeout: must be greater than 0, got 0"),
    ],
)
def test_an_out_of_range_option_is_named(
    tmp_path: Path, command: str, option: str, value: str, message: str
) -> None:
    db = tmp_path / "s.db"
    args = [command, "--model", "expert", option, value, "--store", str(db)]
    with pytest.raises(ConfigError) as err:
        CliRunner().invoke(app, args, catch_exceptions=False)
    assert str(err.value) == message
    assert not db.exists()  # refused before the store was even opened


def test_unscored_episodes_count_as_failures_and_are_reported(tmp_path: Path) -> None:
    spec = env_file(tmp_path, faults={"t1": "step"})
    args = ["--env", spec, "--model", "expert", "--tasks", "4", "--store", str(tmp_path / "s.db")]
    # The episode that raised is work that failed: exit 3, its reason printed (on stderr).
    summary = invoke(*args, "--json", exit_code=ExitCode.PARTLY_FAILED)
    assert summary["statuses"] == {"ok": 3, "truncated": 0, "error": 1, "timeout": 0}
    assert (summary["scored"], summary["success"], summary["reward_mean"]) == (3, 0.75, 1.0)
    result = CliRunner().invoke(app, ["rollout", *args], catch_exceptions=False)
    assert result.exit_code == ExitCode.PARTLY_FAILED, result.output
    lines = result.stdout.splitlines()
    assert any("success" in ln and "75.0%" in ln for ln in lines)
    assert any("scored" in ln and "3/4" in ln for ln in lines)
    assert "1 of 4 episodes failed:" in result.stderr
    assert "1 x error, infra: KeyError: 'tool table missing' (e.g. " in result.stderr


def test_precision_bf16_without_native_bf16_is_refused_by_the_command(tmp_path: Path) -> None:
    args = ["rollout", "--model", "tiny", "--precision", "bf16", "--store", str(tmp_path / "s.db")]
    with pytest.raises(ConfigError, match=r"^--precision: bf16 was asked for"):
        CliRunner().invoke(app, args, catch_exceptions=False)


def interrupt_after(monkeypatch: pytest.MonkeyPatch, episodes: int) -> None:
    """Ctrl-C as the store takes in episode number ``episodes`` (stored by then)."""
    add = TrajectoryStore.add
    stored: list[str] = []

    def add_then_interrupt(self: TrajectoryStore, traj: Trajectory) -> None:
        add(self, traj)
        stored.append(traj.id)
        if len(stored) == episodes:
            raise KeyboardInterrupt

    monkeypatch.setattr(TrajectoryStore, "add", add_then_interrupt)


def resume_args(result: Result) -> list[str]:
    """The arguments of the ``trajforge ...`` command that an interrupted run printed."""
    line = next(ln for ln in result.stderr.splitlines() if ln.startswith("trajforge "))
    return line.split()[1:]


@pytest.mark.parametrize("command", ["rollout", "eval"])
def test_ctrl_c_says_what_is_stored_and_how_to_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    db = tmp_path / "s.db"
    args = [command, "--model", "expert", "--tasks", "4", "--concurrency", "1", "--run", "r"]
    with monkeypatch.context() as patch:
        interrupt_after(patch, 2)
        result = CliRunner().invoke(app, [*args, "--store", str(db)])
    assert result.exit_code == 130, result.output
    assert "2 of 4 episodes of run r are stored" in result.stderr
    resume = resume_args(result)
    assert resume == [command, "--resume", "r", "--store", str(db)]
    finished = CliRunner().invoke(app, [*resume, "--json"], catch_exceptions=False)
    assert finished.exit_code == 0, finished.output
    assert json.loads(finished.stdout)["scored"] == 4
    with TrajectoryStore(db) as store:
        assert store.count(run="r") == 4


def stored_rows(db: Path, run: str) -> int:
    """Trajectories of ``run`` committed so far, read without ever waiting on the writer (a
    store opened while the rollout writes may queue behind its lock for seconds)."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.05)
        try:
            row = conn.execute("SELECT count(*) FROM trajectories WHERE run_id = ?", (run,))
            return int(row.fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigint_stops_a_rollout_process_resumably(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    # Slow enough that the first stored episode is seen well before the eighth ends, on a
    # loaded machine too.
    spec = env_file(tmp_path, delay=1.0)
    args = ["--env", spec, "--model", "expert", "--tasks", "8", "--concurrency", "1"]
    trajforge = Path(sys.executable).with_name("trajforge")
    proc = subprocess.Popen(
        [str(trajforge), "rollout", *args, "--run", "slow", "--store", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        # A disposition of "ignore" survives exec: where something in this test process left
        # SIGINT ignored, the child would ignore Ctrl-C too (seen in the full suite).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # Episodes end every ~2 s (two 1 s steps each), so 8 s after the start some are stored and
    # most are not, even where this process's own polling is slowed by a loaded suite.
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and proc.poll() is None:
        if stored_rows(db, "slow"):
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    with TrajectoryStore(db) as store:
        stored = store.count(run="slow")
    assert 1 <= stored < 8
    assert f"{stored} of 8 episodes of run slow are stored" in stderr
    assert f"trajforge rollout --resume slow --store {db}" in stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_rollout_command_shows_a_summary_table(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "rollout",
            "--env",
            "calculator",
            "--model",
            "tiny",
            "--tasks",
            "2",
            "--max-new-tokens",
            "8",
            "--lockstep",
            "--store",
            str(tmp_path / "t.db"),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert (
        "episodes" in result.stdout
        and "2/2" in result.stdout
        and "status truncated" in result.stdout
    )
    assert "lockstep" in result.stdout
