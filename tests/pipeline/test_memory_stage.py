"""Experience memory in an experiment: a memory stage distils earlier stages' trajectories
into its own file, an eval stage reads it (or any memory file), grows only its own copy, and
is made again when its memory is; a memory it cannot read is refused before anything runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from trajforge.errors import ConfigError
from trajforge.memory.items import read_memory
from trajforge.pipeline.config import check_experiment, load_experiment
from trajforge.pipeline.fingerprint import StageMaking, stage_inputs
from trajforge.pipeline.runner import ExperimentRunner
from trajforge.store import TrajectoryStore

DEMOS: dict[str, Any] = {"kind": "demonstrations", "tasks": 4}
MEMORY: dict[str, Any] = {"kind": "memory"}
RECALL: dict[str, Any] = {"kind": "eval", "name": "recall", "memory": "memory", "memory_k": 2}
GROW: dict[str, Any] = {"kind": "eval", "name": "grow", "memory": "memory", "memory_update": True}


def _experiment(tmp_path: Path, stages: list[dict[str, Any]], **extra: Any) -> Path:
    path = tmp_path / "experiment.yaml"
    data = {
        "name": "mem",
        "env": "calculator",
        "model": "expert",
        "eval": {"tasks": 3},
        "out_dir": str(tmp_path / "runs"),
        "stages": stages,
        **extra,
    }
    path.write_text(yaml.safe_dump(data))
    return path


def _run(path: Path) -> dict[str, Any]:
    return ExperimentRunner(load_experiment(path), console=Console(quiet=True)).run()


def _stage(results: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in results["stages"] if s["name"] == name)


@pytest.mark.slow
def test_a_memory_stage_feeds_the_evals_that_name_it(tmp_path: Path) -> None:
    path = _experiment(tmp_path, [DEMOS, MEMORY, RECALL, GROW])
    results = _run(path)
    run_dir = tmp_path / "runs" / "mem"
    memory = _stage(results, "memory")
    assert (memory["status"], memory["path"], memory["items"]) == ("done", "memory/memory.jsonl", 4)
    assert memory["inputs"].keys() == {"demonstrations"}
    stage_file = run_dir / "memory" / "memory.jsonl"
    items = read_memory(stage_file)
    with TrajectoryStore(run_dir / "store.db") as db:
        demo_ids = {t.id for t in db.query(run="mem.demonstrations")}
        recalled = db.query(run="mem.recall")
        grown = db.query(run="mem.grow")
    assert len(demo_ids) == 4
    assert {s for i in items for s in i.sources} == demo_ids
    item_ids = {i.id for i in items}
    assert len(recalled) == 3
    for traj in recalled:
        retrieved = traj.metadata["memory"]["items"]
        assert 1 <= len(retrieved) <= 2
        assert {r["id"] for r in retrieved} <= item_ids
    recall = _stage(results, "recall")
    assert recall["inputs"].keys() == {"memory"}
    assert recall["memory"]["retrieved_mean"] == pytest.approx(
        sum(len(t.metadata["memory"]["items"]) for t in recalled) / 3
    )
    assert "items retrieved per episode" in recall["text"]
    # memory_update grows the eval's own copy, never the memory stage's file.
    assert len(read_memory(stage_file)) == 4
    copy = run_dir / "grow" / "memory.jsonl"
    assert len(read_memory(copy)) == 4 + len(grown) == 7
    assert _stage(results, "grow")["memory"]["learnt"] == 3
    assert all("memory" in t.metadata for t in grown)
    assert "memory" in (run_dir / "report.html").read_text()

    # Nothing changed: both are skipped.
    again = _run(path)
    for name in ("memory", "recall", "grow"):
        assert _stage(again, name)["attempt"] == 0
        assert _stage(again, name)["fingerprint"] == _stage(results, name)["fingerprint"]

    # The memory stage made again (its settings edited) makes its evals again too.
    path = _experiment(tmp_path, [DEMOS, {**MEMORY, "stages": ["demonstrations"]}, RECALL, GROW])
    remade = _run(path)
    assert [
        _stage(remade, n)["attempt"] for n in ("demonstrations", "memory", "recall", "grow")
    ] == [
        0,
        1,
        1,
        1,
    ]
    # Each stage's folder holds its new attempt; the one before is set aside.
    assert _stage(remade, "memory")["path"] == "memory/memory.jsonl"
    assert (run_dir / "grow" / "memory.jsonl").is_file()
    assert (run_dir / ".attempts" / "grow.0" / "memory.jsonl").is_file()
    assert len(read_memory(run_dir / "memory" / "memory.jsonl")) == 4


def test_an_eval_reading_a_memory_file_records_its_hash(tmp_path: Path) -> None:
    mem = tmp_path / "mem.jsonl"
    item = {
        "id": "m1", "env": "calculator", "title": "t", "applies_when": "w", "lesson": "l",
        "kind": "success", "sources": ["x"],
    }  # fmt: skip
    mem.write_text(json.dumps(item) + "\n")
    stages = [
        {"kind": "eval", "name": "plain"},
        {"kind": "eval", "name": "read", "memory": str(mem)},
    ]
    exp = load_experiment(_experiment(tmp_path, stages))
    check_experiment(exp, tmp_path / "runs" / "mem")
    made = StageMaking(exp, tmp_path / "runs" / "mem", "fp32")
    assert "memory" not in made.config(0, "expert", None)  # older records' configs unchanged
    before = made.config(1, "expert", None)["memory"]
    assert (before["memory"], before["k"], before["update"]) == (str(mem), 3, False)
    mem.write_text(json.dumps({**item, "lesson": "another"}) + "\n")
    assert made.config(1, "expert", None)["memory"]["sha256"] != before["sha256"]
    assert "embed" not in before  # BM25: older records' configs unchanged
    assert stage_inputs(exp, 1) == []


def test_an_eval_retrieves_by_embeddings_where_it_names_a_model(tmp_path: Path) -> None:
    mem = tmp_path / "mem.jsonl"
    items = [
        {"id": f"m{k}", "env": "calculator", "title": f"t{k}", "applies_when": "w",
         "lesson": f"lesson {k}", "kind": "success", "sources": ["x"]}
        for k in range(3)
    ]  # fmt: skip
    mem.write_text("".join(json.dumps(i) + "\n" for i in items))
    stage = {"kind": "eval", "name": "near", "memory": str(mem), "memory_k": 2}
    path = _experiment(tmp_path, [{**stage, "memory_embed": "tiny"}])
    made = StageMaking(load_experiment(path), tmp_path / "runs" / "mem", "fp32")
    assert made.config(0, "expert", None)["memory"]["embed"] == "tiny"
    results = _run(path)
    with TrajectoryStore(tmp_path / "runs" / "mem" / "store.db") as db:
        near = db.query(run="mem.near")
    assert _stage(results, "near")["memory"]["retrieved_mean"] == 2
    for traj in near:  # the k nearest, whatever their similarity
        assert traj.metadata["memory"]["retriever"] == "embedding:tiny"
        assert len(traj.metadata["memory"]["items"]) == 2


def test_a_memory_stage_reads_the_stages_it_names(tmp_path: Path) -> None:
    stages = [{"kind": "eval", "name": "base"}, DEMOS, {"kind": "memory", "stages": ["base"]}]
    exp = load_experiment(_experiment(tmp_path, stages))
    assert stage_inputs(exp, 2) == ["base"]
    exp = load_experiment(_experiment(tmp_path, [*stages[:2], MEMORY, RECALL]))
    assert stage_inputs(exp, 2) == ["base", "demonstrations"]
    assert stage_inputs(exp, 3) == ["memory"]
    with pytest.raises(ConfigError, match="memory stage 'memory' reads 'later', which is not"):
        load_experiment(_experiment(tmp_path, [DEMOS, {**MEMORY, "stages": ["later"]}]))
    with pytest.raises(ConfigError, match="memory stage 'memory' has no earlier stage"):
        load_experiment(_experiment(tmp_path, [MEMORY]))


def _problem(tmp_path: Path, stages: list[dict[str, Any]], **extra: Any) -> str:
    exp = load_experiment(_experiment(tmp_path, stages, **extra))
    with pytest.raises(ConfigError) as err:
        check_experiment(exp, tmp_path / "runs" / "mem")
    return str(err.value)


def test_a_memory_that_cannot_be_read_is_refused_before_anything_runs(tmp_path: Path) -> None:
    unknown = _problem(tmp_path, [{"kind": "eval", "name": "x", "memory": "y"}])
    assert unknown.endswith(
        "stages.x.memory: eval stage 'x': memory 'y' is not an earlier memory stage or a memory file"
    )
    assert "\n" not in unknown
    # A memory stage after the eval is not one it can read.
    later = _problem(tmp_path, [DEMOS, {**RECALL, "memory": "memory"}, MEMORY])
    assert "memory 'memory' is not an earlier memory stage" in later
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a"}\n')
    refused = _problem(tmp_path, [{"kind": "eval", "name": "x", "memory": str(bad)}])
    assert f"{bad}:1: " in refused and "\n" not in refused
    assert not (tmp_path / "runs").exists()  # nothing was written
    update = _problem(tmp_path, [{"kind": "eval", "name": "x", "memory_update": True}])
    assert "memory_update: give memory" in update
    embed = _problem(tmp_path, [{"kind": "eval", "name": "x", "memory_embed": "tiny"}])
    assert "memory_embed: give memory" in embed
    unknown_model = [DEMOS, MEMORY, {**RECALL, "memory_embed": "no-such-model"}]
    assert "stages.recall.memory_embed: " in _problem(tmp_path, unknown_model)
    ray = _problem(tmp_path, [DEMOS, MEMORY, RECALL], ray={})
    assert "a memory is read in this process; not with ray" in ray
    held_out = [{"kind": "eval", "name": "base"}, {**MEMORY, "stages": ["base"]}, RECALL]
    assert "distils held-out episodes" in _problem(tmp_path, held_out)
