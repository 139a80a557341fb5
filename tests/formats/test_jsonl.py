"""JSONL read/write: round trip, streaming, atomic writes, and one-line errors naming file:line:field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trajforge.errors import DataError
from trajforge.formats.jsonl import (
    json_error,
    load_trajectories,
    read_trajectories,
    write_trajectories,
)
from trajforge.schema import Trajectory
from trajforge.schema.synthetic import synthetic_trajectory


def _records(n: int = 3) -> list[dict[str, Any]]:
    return [synthetic_trajectory(i).model_dump(mode="json") for i in range(n)]


def _write_lines(path: Path, records: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    trajs = [synthetic_trajectory(i, turns=t) for i, t in enumerate((1, 3, 6))]
    path = tmp_path / "out" / "trajs.jsonl"
    assert write_trajectories(path, trajs) == 3
    assert load_trajectories(path) == trajs
    assert path.read_text().count("\n") == 3


def test_synthetic_trajectory_is_deterministic_and_tool_using() -> None:
    traj = synthetic_trajectory(7, run_id="r", samples_per_task=4)
    assert traj == synthetic_trajectory(7, run_id="r", samples_per_task=4)
    assert (traj.task.id, traj.sample_index, traj.num_turns) == ("task-1", 3, 6)
    assert traj.is_tokenized
    assert sum(len(m.tool_calls) for m in traj.messages) == 5
    assert traj.messages[-1].content == f"The answer is {traj.task.answer}."


def test_read_streams_one_record_at_a_time(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "t.jsonl", [*_records(2), "{not json"])
    stream = read_trajectories(path)
    first = next(stream)
    assert isinstance(first, Trajectory)
    assert next(stream).id == _records(2)[1]["id"]
    with pytest.raises(DataError, match=r"t\.jsonl:3:2: invalid JSON"):
        next(stream)


def test_blank_lines_are_skipped_and_line_numbers_stay_true(tmp_path: Path) -> None:
    records = _records(2)
    records[1]["outcome"]["status"] = "finished"
    path = _write_lines(tmp_path / "t.jsonl", [records[0], "", "   ", records[1]])
    with pytest.raises(DataError) as err:
        load_trajectories(path)
    message = str(err.value)
    assert message.startswith(f"{path}:4: outcome.status: ")
    assert "'finished'" in message
    assert "\n" not in message


def test_bad_json_names_line_and_column(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "t.jsonl", [_records(1)[0], '{"id": "x", "task": }'])
    with pytest.raises(DataError, match=r"^.*t\.jsonl:2:21: invalid JSON: Expecting value$"):
        load_trajectories(path)


@pytest.mark.parametrize(
    ("mutate", "field", "what"),
    [
        (
            lambda r: r["messages"][2].__setitem__("token_ids", ["a"]),
            "messages.2.token_ids.0",
            "valid integer",
        ),
        (
            lambda r: r["messages"][3].__setitem__("tool_call_id", "call_9_9"),
            "messages.3.tool_call_id",
            "matches no tool call",
        ),
        (lambda r: r["messages"].__delitem__(3), "messages.3", "call_0_0 were never answered"),
        (
            lambda r: r["messages"].insert(2, {"role": "tool", "tool_call_id": "call_9_9"}),
            "messages.2.role",
            "tool may not follow user",
        ),
        (
            lambda r: r.__setitem__("messages", r["messages"][:3]),
            "messages",
            "call_0_0 were never answered",
        ),
        (
            lambda r: r["messages"][2].__setitem__("logprobs", [0.0]),
            "messages.2.logprobs",
            "1 logprobs but token_ids has",
        ),
        (
            lambda r: r["messages"][1].__setitem__("colour", "red"),
            "messages.1.colour",
            "Extra inputs are not permitted",
        ),
        (lambda r: r.__delitem__("task"), "task", "Field required"),
        (lambda r: r["outcome"].__setitem__("reward", "high"), "outcome.reward", "valid number"),
    ],
)
def test_bad_record_names_file_line_and_field(
    tmp_path: Path, mutate: Any, field: str, what: str
) -> None:
    records = _records(3)
    records[1]["outcome"]["status"] = "ok"
    mutate(records[1])
    path = _write_lines(tmp_path / "bad.jsonl", records)
    with pytest.raises(DataError) as err:
        load_trajectories(path)
    message = str(err.value)
    assert message.startswith(f"{path}:2: {field}: "), message
    assert what in message
    assert "\n" not in message


def test_record_that_is_not_an_object(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "t.jsonl", ["[1, 2]"])
    with pytest.raises(DataError, match=r"t\.jsonl:1: \(record\): "):
        load_trajectories(path)


def test_missing_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"missing\.jsonl: cannot read"):
        load_trajectories(tmp_path / "missing.jsonl")


def test_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_trajectories(path, [synthetic_trajectory(0)])
    before = path.read_bytes()

    def broken() -> Any:
        yield synthetic_trajectory(1)
        raise RuntimeError("producer failed")

    with pytest.raises(RuntimeError):
        write_trajectories(path, broken())
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]


def test_a_line_cut_short_is_reported_at_its_end_not_at_column_1() -> None:
    assert (
        json_error(b'{"messages": [\n', "f.jsonl:4")
        == "f.jsonl:4:15: invalid JSON: Expecting value"
    )
    assert json_error('{"a": 1,\r\n', "f.jsonl:1") == (
        "f.jsonl:1:9: invalid JSON: Expecting property name enclosed in double quotes"
    )
