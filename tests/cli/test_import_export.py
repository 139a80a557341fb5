"""``import`` and ``export`` as a user meets them: the format detected and named, a wrong
``--format`` pointed at the likely one, round trips that store no duplicates, an export of no
pairs that says why, files that honour the umask, and ``check`` on text-only data."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_runner import RunCli
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore

CHAT = {
    "messages": [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "4"},
    ]
}


@pytest.fixture
def chat_file(tmp_path: Path) -> Path:
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps(CHAT) + "\n")
    return path


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_import_without_format_detects_it_and_says_which(
    run_cli: RunCli, chat_file: Path, tmp_path: Path
) -> None:
    code, out, err = run_cli("import", chat_file, "--store", tmp_path / "s.db")
    assert (code, err) == (0, "")
    assert f"imported 1 trajectories (openai, detected) from {chat_file}" in out


def test_a_wrong_format_names_the_likely_one(
    run_cli: RunCli, chat_file: Path, tmp_path: Path
) -> None:
    code, _, err = run_cli(
        "import", chat_file, "--format", "sharegpt", "--store", tmp_path / "s.db"
    )
    assert code == 1
    assert err.strip().endswith("(the file looks like openai: --format openai)"), err
    assert not (tmp_path / "s.db").exists()


def test_openai_to_store_to_sharegpt_and_back_stores_no_duplicates(
    run_cli: RunCli, chat_file: Path, tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    assert run_cli("import", chat_file, "--store", store)[0] == 0
    shared = tmp_path / "shared.jsonl"
    assert run_cli("export", "--out", shared, "--format", "sharegpt", "--store", store)[0] == 0
    code, _, err = run_cli("import", shared, "--store", store)
    assert code == 1 and "already" in err
    code, out, _ = run_cli("import", shared, "--skip-existing", "--store", store)
    assert code == 0 and "imported 0 trajectories (sharegpt, detected)" in out
    assert "1 already stored" in out
    with TrajectoryStore(store) as db:
        assert db.count() == 1


def test_an_export_of_no_pairs_says_why(run_cli: RunCli, tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    with TrajectoryStore(store) as db:
        db.add_many([synthetic_trajectory(i) for i in range(3)])  # one per task: no groups
    out = tmp_path / "pairs.jsonl"
    code, printed, err = run_cli(
        "export", "--out", out, "--format", "trl-preference", "--store", store
    )
    assert code == 0 and "exported 0 preference pairs" in printed
    assert err.startswith("none exported: no group of 3 holds two trajectories with a reward")


def test_an_export_of_nothing_says_no_trajectory_matches(run_cli: RunCli, tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    with TrajectoryStore(store) as db:
        db.add_many([synthetic_trajectory(0)])
    code, _, err = run_cli(
        "export", "--out", tmp_path / "o.jsonl", "--status", "timeout", "--store", store
    )
    assert code == 0 and err.strip() == "none exported: no trajectory matches the filters"


@pytest.mark.parametrize("name", ["out.jsonl", "out.parquet"])
def test_exported_files_honour_the_umask(
    run_cli: RunCli, tmp_path: Path, umask_022: None, name: str
) -> None:
    store = tmp_path / "s.db"
    with TrajectoryStore(store) as db:
        db.add_many([synthetic_trajectory(0)])
    out = tmp_path / name
    assert run_cli("export", "--out", out, "--format", "openai", "--store", store)[0] == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    os.umask(0o077)
    assert run_cli("export", "--out", out, "--format", "openai", "--store", store)[0] == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_check_on_text_only_data_says_none_could_be_checked(
    run_cli: RunCli, chat_file: Path, tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    assert run_cli("import", chat_file, "--store", store)[0] == 0
    code, out, err = run_cli("check", "--store", store)
    assert code == 1
    assert "all token-exact" not in out and "none could be checked" in out
    assert err.strip() == (
        "error: check: none of the 1 trajectories could be checked: 1 carry no token ids (text "
        "only: imported, or recorded from a server that reports none; import --render-with "
        "MODEL gives them ids)"
    )


def test_harbor_s_trajectory_json_in_and_atif_out_and_in_again(
    run_cli: RunCli, tmp_path: Path
) -> None:
    example = Path(__file__).parents[1] / "formats" / "atif_examples" / "rfc_v1_5_stock_price.json"
    store, out = tmp_path / "s.db", tmp_path / "atif.jsonl"
    code, text, err = run_cli("import", example, "--store", store)
    assert (code, err) == (0, "") and "imported 1 trajectories (atif, detected)" in text
    assert run_cli("export", "--out", out, "--format", "atif", "--store", store)[0] == 0
    assert json.loads(out.read_text())["steps"][1]["tool_calls"][1]["tool_call_id"] == (
        "call_volume_2")  # fmt: skip
    code, text, _ = run_cli("import", out, "--skip-existing", "--store", store)
    assert code == 0 and "1 already stored" in text
    newer = tmp_path / "trajectory.json"
    newer.write_text(json.dumps({**json.loads(example.read_text()), "schema_version": "ATIF-v9"}))
    code, _, err = run_cli("import", newer, "--format", "atif", "--store", tmp_path / "n.db")
    assert code == 1 and "schema_version: 'ATIF-v9' is not an ATIF version" in err
    assert not (tmp_path / "n.db").exists()
