"""A segmented episode exports one record per segment, each naming its episode and index, or
is refused by name where a format cannot link the segments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajforge.errors import DataError
from trajforge.formats import FORMATS, load_trajectories, write_records
from trajforge.schema import Segment, Trajectory
from trajforge.schema.synthetic import synthetic_trajectory


def _chain() -> list[Trajectory]:
    first, last = synthetic_trajectory(0, turns=2), synthetic_trajectory(1, turns=2)
    return [
        first.model_copy(update={"segment": Segment(episode_id=last.id, index=0)}),
        last.model_copy(update={"segment": Segment(episode_id=last.id, index=1)}),
    ]


@pytest.mark.parametrize("name", ["openai", "sharegpt", "responses", "trl-prompt-completion"])
def test_linking_formats_write_one_record_per_segment(tmp_path: Path, name: str) -> None:
    chain = _chain()
    out = tmp_path / "out.jsonl"
    assert write_records(out, chain, FORMATS.get(name)) == 2
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["episode_id"], r["segment_index"]) for r in records] == [
        (t.id, chain[-1].id, i) for i, t in enumerate(chain)
    ]


def test_trajforge_records_keep_the_segment(tmp_path: Path) -> None:
    chain = _chain()
    out = tmp_path / "out.jsonl"
    write_records(out, chain, FORMATS.get("trajforge"))
    assert [t.segment for t in load_trajectories(out)] == [t.segment for t in chain]


@pytest.mark.parametrize("name", ["adp", "atif", "otel"])
def test_a_format_that_cannot_link_segments_refuses_them_by_name(tmp_path: Path, name: str) -> None:
    chain = _chain()
    with pytest.raises(DataError, match=rf"segment 0 of episode {chain[-1].id}.*'{name}'"):
        write_records(tmp_path / "out.jsonl", chain, FORMATS.get(name))
    assert not (tmp_path / "out.jsonl").exists()
    # Trajectories of one context still export as before.
    assert write_records(tmp_path / "one.jsonl", [synthetic_trajectory(2)], FORMATS.get(name)) == 1
