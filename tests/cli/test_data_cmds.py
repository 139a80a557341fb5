"""trajforge schema/import/ls/show/stats/export, run through the real entry point."""

from __future__ import annotations

import json
import re
import sqlite3
import uuid
from pathlib import Path

import pytest

from cli_runner import RunCli
from trajforge.formats.jsonl import load_trajectories, write_trajectories
from trajforge.schema import SCHEMA_VERSION, Fault, Outcome, OutcomeStatus
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore

Cli = RunCli


@pytest.fixture
def cli(run_cli: RunCli) -> RunCli:
    """This module's name for the ``run_cli`` fixture (tests/cli/conftest.py)."""
    return run_cli


@pytest.fixture
def good_file(tmp_path: Path) -> Path:
    path = tmp_path / "good.jsonl"
    write_trajectories(
        path, [synthetic_trajectory(i, env="calc" if i % 2 else "py") for i in range(12)]
    )
    return path


def test_schema_prints_the_versioned_json_schema(cli: Cli) -> None:
    code, out, _ = cli("schema")
    assert code == 0
    schema = json.loads(out)
    assert schema["version"] == SCHEMA_VERSION and "messages" in schema["properties"]


@pytest.mark.parametrize("command", ["schema", "import", "ls", "show", "stats", "export"])
def test_every_command_has_help(cli: Cli, command: str) -> None:
    code, out, _ = cli(command, "--help")
    assert code == 0 and "Usage" in out
    if command != "schema":
        assert "--store" in out


def test_import_then_ls_show_stats_export(cli: Cli, good_file: Path, tmp_path: Path) -> None:
    db = tmp_path / "runs" / "t.db"
    code, out, err = cli("import", good_file, "--run", "imported", "--store", db)
    assert code == 0, err
    assert "imported 12 trajectories" in out

    code, out, _ = cli("ls", "--json", "--env", "calc", "--limit", "4", "--store", db)
    rows = json.loads(out)
    assert code == 0 and len(rows) == 4
    assert {r["env"] for r in rows} == {"calc"} and {r["run_id"] for r in rows} == {"imported"}
    assert [r["created_at"] for r in rows] == sorted((r["created_at"] for r in rows), reverse=True)

    code, out, _ = cli("ls", "--store", db, "--min-reward", "0.5")
    expected = [t for t in load_trajectories(good_file) if (t.reward or 0) >= 0.5]
    assert code == 0 and f"{len(expected)} of {len(expected)} trajectories" in out

    traj = synthetic_trajectory(5, env="calc")
    code, out, _ = cli("show", traj.id, "--store", db)
    assert code == 0
    for text in (
        "assistant · turn 5",
        "tool · calculator ← call_0_0",
        '{"expression": ',
        traj.messages[3].content,
        f"The answer is {traj.task.answer}",
        "score correct",
        f"{traj.reward:g}",
        traj.outcome.status.value,
    ):
        assert text in out, text

    code, out, _ = cli("stats", "--json", "--store", db)
    with TrajectoryStore(db) as store:
        counts = store.stats()
    figures = json.loads(out)
    assert (figures["count"], figures["status"]) == (counts["count"], counts["status"])
    assert figures["reward_mean"] == pytest.approx(counts["reward_mean"])
    imported = figures["by_run"]["imported"]
    assert imported["count"] == 12 and imported["scored"] == 12 and 0 <= imported["success"] <= 1
    assert {"success", "scored", "reward_mean"} <= figures["by_env"]["py"].keys()
    code, out, _ = cli("stats", "--store", db)
    assert code == 0 and "by run" in out and "imported" in out and "by env" in out

    export = tmp_path / "export.jsonl"
    code, out, _ = cli("export", "--out", export, "--env", "py", "--store", db)
    assert code == 0 and "exported 6 trajectories" in out
    originals = {
        t.id: t.model_copy(update={"run_id": "imported"}) for t in load_trajectories(good_file)
    }
    exported = load_trajectories(export)
    assert len(exported) == 6 and all(t == originals[t.id] for t in exported)


def _malformed(tmp_path: Path, kind: str) -> tuple[Path, str]:
    records = [synthetic_trajectory(i).model_dump(mode="json") for i in range(3)]
    lines = [json.dumps(r) for r in records]
    if kind == "bad-json":
        lines[2] = lines[2][:-5]
        where = r":3:\d+: invalid JSON: "
    elif kind == "wrong-type":
        records[1]["messages"][4]["token_ids"] = "1 2 3"
        lines[1] = json.dumps(records[1])
        where = r":2: messages\.4\.token_ids: Input should be a valid array"
    else:
        records[2]["messages"] = records[2]["messages"][:5]  # the last call has no tool answer
        records[2]["outcome"]["status"] = "ok"
        lines[2] = json.dumps(records[2])
        where = r":3: messages: tool call\(s\) call_1_0 were never answered"
    path = tmp_path / f"{kind}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path, where


@pytest.mark.parametrize("kind", ["bad-json", "wrong-type", "unanswered-call"])
def test_malformed_file_is_refused_whole(cli: Cli, tmp_path: Path, kind: str) -> None:
    db = tmp_path / "t.db"
    with TrajectoryStore(db) as store:
        store.add(synthetic_trajectory(0, run_id="earlier"))
    path, where = _malformed(tmp_path, kind)
    code, _, err = cli("import", path, "--store", db)
    assert code == 1
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert re.search(re.escape(str(path)) + where, err), err
    with TrajectoryStore(db) as store:
        assert store.count() == 1


def test_duplicates_refused_unless_skipped(cli: Cli, good_file: Path, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    assert cli("import", good_file, "--store", db)[0] == 0
    code, _, err = cli("import", good_file, "--store", db)
    assert code == 1 and "already stored" in err
    code, out, _ = cli("import", good_file, "--store", db, "--skip-existing")
    assert code == 0 and "imported 0 trajectories" in out and "12 already stored" in out


@pytest.mark.parametrize(
    "args", [("ls",), ("stats",), ("show", "x"), ("export", "--out", "o.jsonl")]
)
def test_read_commands_do_not_create_a_store(
    cli: Cli, tmp_path: Path, args: tuple[str, ...]
) -> None:
    db = tmp_path / "missing.db"
    code, _, err = cli(*args, "--store", db)
    assert (
        code == 1
        and err
        == f"error: no store at {db} (import or collect trajectories first, or pass --store)\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_store_path_from_environment(
    cli: Cli, good_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "env.db"
    monkeypatch.setenv("TRAJFORGE_STORE", str(db))
    assert cli("import", good_file)[0] == 0
    code, _, err = cli("show", "nope")
    assert code == 1 and err == f"error: no trajectory starting with 'nope' in {db}\n"
    assert TrajectoryStore(db).count() == 12


def test_error_lines_keep_brackets(cli: Cli, good_file: Path, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    assert cli("import", good_file, "--store", db)[0] == 0
    code, _, err = cli("show", "x[call_0_0]", "--store", db)
    assert code == 1 and err == f"error: no trajectory starting with 'x[call_0_0]' in {db}\n"


@pytest.fixture
def wide_db(tmp_path: Path) -> tuple[Path, list[str]]:
    """Trajectories as a rollout writes them: uuid ids, a generated run id, long task ids."""
    trajs = []
    for i in range(6):
        t = synthetic_trajectory(i, run_id="run-0a1b2c3d4e5f", env="calculator")
        task = t.task.model_copy(update={"id": f"calculator-{uuid.uuid4().hex[:12]}"})
        trajs.append(t.model_copy(update={"id": uuid.uuid4().hex, "task": task}))
    db = tmp_path / "runs" / "t.db"
    with TrajectoryStore(db) as store:
        store.add_many(trajs)
    return db, [t.id for t in trajs]


def test_ls_fits_80_columns_with_short_ids_that_show_accepts(
    cli: Cli, wide_db: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, ids = wide_db
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("ls", "--store", db)
    assert code == 0
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), out
    assert "…" not in out  # no cell cut short
    header = lines[1].split()
    assert header[0] == "id" and {"run", "task", "status", "reward"} <= set(header), header
    rows = lines[3 : 3 + len(ids)]
    assert all("run-0a1b2c3d4e5f" in row and "calculator-" in row for row in rows), out
    short_ids = [row.split()[0] for row in rows]
    assert sorted(short_ids) == sorted(i[:8] for i in ids)
    assert re.search(r"left out at 80 columns: sample, tokens\b", out), out
    for short_id, full in zip(short_ids, ids[::-1], strict=True):
        code, shown, err = cli("show", short_id, "--json", "--store", db)
        assert code == 0 and json.loads(shown)["id"] == full, err

    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = cli("ls", "--store", db)
    assert code == 0 and "left out" not in out and "tokens" in out.splitlines()[1]


def test_stats_fits_80_columns(
    cli: Cli, wide_db: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, ids = wide_db
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("stats", "--store", db)
    assert code == 0
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "…" not in out
    all_row = next(ln for ln in out.splitlines() if ln.startswith("all "))
    assert all_row.split()[1] == str(len(ids)) and "%" in all_row, out
    assert "success" in out and "scored" in out

    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = cli("stats", "--store", db)
    assert code == 0 and "left out" not in out and "std" in out and "status" in out


def test_run_prefix_in_every_data_command(cli: Cli, good_file: Path, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    assert cli("import", good_file, "--run", "imported", "--store", db)[0] == 0
    with TrajectoryStore(db) as store:
        store.set_run("improved", {})  # started, nothing stored yet
        store.set_run("baseline", {})
        store.add(synthetic_trajectory(99, run_id="baseline"))
    code, out, _ = cli("ls", "--run", "ba", "--json", "--store", db)
    assert code == 0 and [r["run_id"] for r in json.loads(out)] == ["baseline"]
    code, out, _ = cli("stats", "--run", "bas", "--json", "--store", db)
    assert code == 0 and list(json.loads(out)["by_run"]) == ["baseline"]
    export = tmp_path / "out.jsonl"
    code, out, _ = cli("export", "--out", export, "--run", "b", "--store", db)
    assert code == 0 and [t.run_id for t in load_trajectories(export)] == ["baseline"]
    code, _, err = cli("ls", "--run", "im", "--store", db)
    assert code == 1 and err == (
        f"error: --run: 'im' is the start of several run ids in {db}: imported, improved; "
        "give more characters\n"
    )
    code, _, err = cli("show", "synthetic-000000", "--store", db)
    assert code == 1 and "several trajectory ids" in err and "synthetic-0000001, " in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("ls", "--status", "okk"), "--status: 'okk' is not one of ok, truncated, error, timeout"),
        (("stats", "--env", "calcc"), "--env: 'calcc' is not one of calc, py (the envs in {db})"),
        (("export", "--out", "o.jsonl", "--run", "zz"), "--run: no run starting with 'zz' in {db}"),
        (("ls", "--limit", "0"), "--limit: must be at least 1, got 0"),
        (("export", "--out", "o.jsonl", "--limit", "-3"), "--limit: must be at least 1, got -3"),
        (
            ("ls", "--min-reward", "0.9", "--max-reward", "0.1"),
            "--min-reward: 0.9 is above --max-reward 0.1; nothing can match",
        ),
        (("stats", "--max-reward", "nan"), "--max-reward: must be a finite number, got nan"),
    ],
)
def test_bad_filter_values_are_refused_naming_the_option(
    cli: Cli, good_file: Path, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    db = tmp_path / "t.db"
    assert cli("import", good_file, "--store", db)[0] == 0
    code, out, err = cli(*args, "--store", db)
    assert (code, out, err) == (1, "", f"error: {message.format(db=db)}\n")
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize("args", [("ls",), ("show", "x"), ("import", "GOOD")])
def test_foreign_sqlite_file_is_refused_and_left_alone(
    cli: Cli, good_file: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    db = tmp_path / "x.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    argv = [good_file if a == "GOOD" else a for a in args]
    code, _, err = cli(*argv, "--store", db)
    assert (code, err) == (
        1,
        f"error: {db} is a SQLite database but not a trajforge store (no trajectories table)\n",
    )
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([db.name, good_file.name])


def test_non_sqlite_file_is_refused(cli: Cli, tmp_path: Path) -> None:
    db = tmp_path / "notes.db"
    db.write_text("hello\n" * 200)
    code, _, err = cli("stats", "--store", db)
    assert (code, err) == (1, f"error: {db} is not a SQLite database, so not a trajforge store\n")


def test_stats_splits_failures_into_the_policys_and_the_infrastructures(
    cli: Cli, tmp_path: Path
) -> None:
    """Run a: one solved, one wrong answer, one cut off, two lost to a crashed server (one
    of them solved anyway, so not a failure); run b: one lost at start-up."""
    crash = Outcome(status=OutcomeStatus.ERROR, error="MCP server crashed", fault=Fault.INFRA)
    outcomes = {
        "a": [
            Outcome(status=OutcomeStatus.OK, reward=1.0),
            Outcome(status=OutcomeStatus.OK, reward=0.0),
            Outcome(status=OutcomeStatus.TRUNCATED, fault=Fault.POLICY),
            crash,
            Outcome(status=OutcomeStatus.OK, reward=1.0, error="restarted", fault=Fault.INFRA),
        ],
        "b": [crash],
    }
    db = tmp_path / "t.db"
    with TrajectoryStore(db) as store:
        for run, run_outcomes in outcomes.items():
            for i, outcome in enumerate(run_outcomes):
                t = synthetic_trajectory(i, run_id=run, env="calc")
                store.add(t.model_copy(update={"id": f"{run}{i}", "outcome": outcome}))
        # Text that merely mentions the marker is not one.
        fake = synthetic_trajectory(9, run_id="b", env="calc")
        fake.messages[1].content = 'the config says "fault":"infra"'
        fake.task.metadata["outcome"] = {"fault": "infra"}
        wrong = Outcome(status=OutcomeStatus.OK, reward=0.0)
        store.add(fake.model_copy(update={"id": "b9", "outcome": wrong}))
    code, out, _ = cli("stats", "--json", "--store", db)
    assert code == 0
    result = json.loads(out)
    figures = lambda agg: (agg["policy_failures"], agg["infra_failures"])  # noqa: E731
    assert figures(result) == (3, 2)
    assert figures(result["by_run"]["a"]) == (2, 1)
    assert figures(result["by_run"]["b"]) == (1, 1)
    assert figures(result["by_env"]["calc"]) == (3, 2)
    code, out, _ = cli("stats", "--store", db)
    assert "policy fail" in out and "infra fail" in out
    all_row = next(ln for ln in out.splitlines() if ln.startswith("all "))
    assert all_row.split()[-2:] == ["3", "2"], all_row


def test_ls_and_stats_say_n_a_for_success_when_nothing_was_scored(cli: Cli, tmp_path: Path) -> None:
    db = tmp_path / "unscored.db"
    crashed = Outcome(status=OutcomeStatus.ERROR, reward=None, error="boom")
    with TrajectoryStore(db) as st:
        st.add_many(
            [synthetic_trajectory(i).model_copy(update={"outcome": crashed}) for i in range(2)]
        )
    code, out, _ = cli("ls", "--store", db)
    assert code == 0 and "success n/a · mean reward - · scored 0/2" in out
    code, out, _ = cli("stats", "--store", db)
    all_row = next(ln for ln in out.splitlines() if ln.strip("│ ").startswith("all"))
    assert code == 0 and "n/a" in all_row and "0.0%" not in all_row
