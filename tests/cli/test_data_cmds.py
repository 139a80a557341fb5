"""trajforge schema/import/ls/show/stats/export, run through the real entry point."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from trajforge.cli.main import main
from trajforge.formats.jsonl import load_trajectories, write_trajectories
from trajforge.schema import SCHEMA_VERSION
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore

Result = tuple[int, str, str]
Cli = Callable[..., Result]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    monkeypatch.setenv("COLUMNS", "200")

    def run(*args: str | Path) -> Result:
        monkeypatch.setattr(sys, "argv", ["trajforge", *map(str, args)])
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return run


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
        assert json.loads(out) == json.loads(json.dumps(store.stats()))
    assert json.loads(out)["by_run"]["imported"]["count"] == 12
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
    assert code == 1 and "no trajectory 'nope'" in err
    assert TrajectoryStore(db).count() == 12


def test_error_lines_keep_brackets(cli: Cli, good_file: Path, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    assert cli("import", good_file, "--store", db)[0] == 0
    code, _, err = cli("show", "x[call_0_0]", "--store", db)
    assert code == 1 and err == f"error: no trajectory 'x[call_0_0]' in {db}\n"
