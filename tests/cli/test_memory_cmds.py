"""``trajforge memory build`` and ``--memory`` on rollout and eval: items from a stored run,
retrieval recorded per trajectory, the memory growing, bad files and other envs."""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import RunCli
from trajforge.memory.items import read_memory
from trajforge.memory.live import MEMORY_KEY
from trajforge.store import TrajectoryStore

ENV = ["--env", "keydoor-compact"]


def built_memory(run_cli: RunCli, tmp_path: Path) -> tuple[Path, Path]:
    store, memory = tmp_path / "s.db", tmp_path / "mem.jsonl"
    code, _, err = run_cli(
        "rollout", *ENV, "--model", "expert", "--tasks", "3", "--run", "src", "--store", store
    )
    assert code == 0, err
    code, out, err = run_cli("memory", "build", "--store", store, "--out", memory, "--json")
    assert code == 0, err
    figures = json.loads(out)
    assert (figures["items"], figures["from_successes"], figures["trajectories"]) == (3, 3, 3)
    return store, memory


def test_build_then_eval_with_memory_records_what_it_retrieved(
    run_cli: RunCli, tmp_path: Path
) -> None:
    store, memory = built_memory(run_cli, tmp_path)
    with TrajectoryStore(store) as db:
        sources = {t.id for t in db.query(run="src")}
    items = read_memory(memory)
    assert {i.sources[0] for i in items} == sources
    args = ["--model", "expert", "--tasks", "2", "--split", "train", "--run", "ev"]
    code, _, err = run_cli(
        "eval", *ENV, *args, "--memory", memory, "--memory-k", "2", "--store", store
    )
    assert code == 0, err
    with TrajectoryStore(store) as db:
        evaluated = db.query(run="ev")
        meta = db.get_run("ev")
    assert meta is not None and meta["memory"]["k"] == 2 and meta["memory"]["embed"] is None
    for traj in evaluated:
        record = traj.metadata[MEMORY_KEY]
        assert record["retriever"] == "bm25"
        assert 1 <= len(record["items"]) <= 2
        assert {i["id"] for i in record["items"]} <= {i.id for i in items}
    assert len(read_memory(memory)) == 3  # no --memory-update: the file is unchanged


def test_memory_update_grows_the_file_during_a_rollout(run_cli: RunCli, tmp_path: Path) -> None:
    store, memory = built_memory(run_cli, tmp_path)
    args = ["--model", "expert", "--tasks", "2", "--run", "grow", "--store", store]
    code, _, err = run_cli("rollout", *ENV, *args, "--memory", memory, "--memory-update")
    assert code == 0, err
    assert len(read_memory(memory)) == 5


def test_a_bad_memory_file_is_refused_whole_before_anything_runs(
    run_cli: RunCli, tmp_path: Path
) -> None:
    store, memory = built_memory(run_cli, tmp_path)
    lines = memory.read_text().splitlines()
    memory.write_text("\n".join([lines[0], "{broken", *lines[1:]]) + "\n")
    code, _, err = run_cli(
        "rollout", *ENV, "--model", "expert", "--memory", memory, "--store", store
    )
    assert code != 0
    assert f"{memory}:2: not a memory item" in err
    assert len(err.strip().splitlines()) == 1
    with TrajectoryStore(store) as db:
        assert [r["run_id"] for r in db.list_runs()] == ["src"]


def test_items_of_another_env_are_warned_about_and_not_used(
    run_cli: RunCli, tmp_path: Path
) -> None:
    store, memory = built_memory(run_cli, tmp_path)
    args = ["--env", "gridworld", "--model", "expert", "--tasks", "1", "--run", "other"]
    code, _, err = run_cli("rollout", *args, "--memory", memory, "--store", store)
    assert code == 0, err
    assert "3 items are of another env than 'gridworld'; not used" in err
    with TrajectoryStore(store) as db:
        (traj,) = db.query(run="other")
    assert traj.metadata[MEMORY_KEY]["items"] == []


def test_bad_memory_options_are_one_line(run_cli: RunCli, tmp_path: Path) -> None:
    memory = tmp_path / "mem.jsonl"
    memory.write_text("")
    store = tmp_path / "s.db"
    for args, message in [
        (["--memory-update"], "--memory-update: give --memory FILE.jsonl"),
        (["--memory", memory, "--memory-k", "0"], "--memory-k: must be at least 1, got 0"),
        (["--memory", tmp_path / "none.jsonl"], "none.jsonl: no memory file"),
        (["--memory", memory, "--user", "expert"], "--memory: not with --user"),
        (["--memory", memory, "--ray"], "--memory: a memory is read in this process"),
    ]:
        code, _, err = run_cli("rollout", *ENV, "--model", "expert", *args, "--store", store)
        assert code != 0 and message in err, err
    code, _, err = run_cli("memory", "build", "--store", store, "--out", memory)
    assert code != 0 and "no store at" in err


def test_memory_embed_records_its_model_and_resume_keeps_it(
    run_cli: RunCli, tmp_path: Path
) -> None:
    store, memory = built_memory(run_cli, tmp_path)
    args = ["--model", "expert", "--tasks", "2", "--run", "emb", "--store", store]
    code, _, err = run_cli("rollout", *ENV, *args, "--memory", memory, "--memory-embed", "tiny")
    assert code == 0, err
    with TrajectoryStore(store) as db:
        meta = db.get_run("emb")
        assert meta is not None and meta["memory"]["embed"] == "tiny"
        first = db.query(run="emb")
        # Widen the stored run to 3 tasks: the resumed episode reads the stored plan.
        meta["spec"]["tasks"]["count"] = 3
        db.set_run("emb", meta)
    assert len(first) == 2
    code, _, err = run_cli("rollout", "--resume", "emb", "--store", store)
    assert code == 0, err
    with TrajectoryStore(store) as db:
        every = db.query(run="emb")
    assert len(every) == 3 and {t.id for t in first} < {t.id for t in every}
    for traj in every:
        record = traj.metadata[MEMORY_KEY]
        assert record["retriever"] == "embedding:tiny"
        assert len(record["items"]) == 3  # cosine keeps the k (default 3) nearest of the 3

    code, _, err = run_cli(
        "eval",
        *ENV,
        "--model",
        "expert",
        "--tasks",
        "1",
        "--run",
        "ev",
        "--memory",
        memory,
        "--memory-embed",
        "tiny",
        "--store",
        store,
    )
    assert code == 0, err
    with TrajectoryStore(store) as db:
        (evaluated,) = db.query(run="ev")
    assert evaluated.metadata[MEMORY_KEY]["retriever"] == "embedding:tiny"


def test_bad_memory_embed_options_are_one_line(run_cli: RunCli, tmp_path: Path) -> None:
    memory = tmp_path / "mem.jsonl"
    memory.write_text("")
    store = tmp_path / "s.db"
    for command in ("rollout", "eval"):
        for args, message in [
            (["--memory-embed", "tiny"], "--memory-embed: give --memory FILE.jsonl"),
            (
                ["--memory", memory, "--memory-embed", "tinny"],
                "--memory-embed: unknown embedding model 'tinny' (did you mean 'tiny'?)",
            ),
        ]:
            code, _, err = run_cli(command, *ENV, "--model", "expert", *args, "--store", store)
            assert code != 0 and message in err, err
            assert len(err.strip().splitlines()) == 1, err
    assert not store.exists()
