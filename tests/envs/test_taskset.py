"""TaskSet: JSONL with located errors, seeded generators, deterministic disjoint splits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajforge.envs.builtin import calculator
from trajforge.envs.taskset import TaskSet, content_split, generate_unique
from trajforge.errors import DataError
from trajforge.schema import Task


def tasks(n: int) -> list[Task]:
    return [Task(id=f"t{i}", prompt=f"p{i}", answer=i) for i in range(n)]


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 99])
def test_split_is_disjoint_complete_sized_and_deterministic(fraction: float, seed: int) -> None:
    ts = TaskSet(tasks(200))
    train, test = ts.split(fraction, seed=seed)
    assert set(train.ids).isdisjoint(test.ids)
    assert sorted(train.ids + test.ids) == sorted(ts.ids)
    assert len(test) == round(200 * fraction)
    again_train, again_test = TaskSet(tasks(200)).split(fraction, seed=seed)
    assert (train.ids, test.ids) == (again_train.ids, again_test.ids)
    assert train.ids == [i for i in ts.ids if i in set(train.ids)]
    assert all(t.split == "train" for t in train) and all(t.split == "test" for t in test)


def test_split_membership_depends_only_on_id_not_order() -> None:
    forward = TaskSet(tasks(100)).split(0.3, seed=4)[1]
    backward = TaskSet(list(reversed(tasks(100)))).split(0.3, seed=4)[1]
    assert set(forward.ids) == set(backward.ids)
    assert TaskSet(tasks(100)).split(0.3, seed=5)[1].ids != forward.ids


def test_take_len_iter_getitem_shuffled() -> None:
    ts = TaskSet(tasks(10))
    assert len(ts) == 10 and [t.id for t in ts] == [f"t{i}" for i in range(10)]
    assert ts.take(3).ids == ["t0", "t1", "t2"] and len(ts.take(50)) == 10
    assert ts[4].id == "t4"
    assert ts.shuffled(1).ids == ts.shuffled(1).ids != ts.ids
    assert sorted(ts.shuffled(1).ids) == sorted(ts.ids)


def test_duplicate_ids_are_refused() -> None:
    with pytest.raises(DataError, match="duplicate task id 't0'"):
        TaskSet([*tasks(2), Task(id="t0", prompt="x")])


def test_jsonl_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    TaskSet(tasks(5)).to_jsonl(path)
    loaded = TaskSet.from_jsonl(path, env="calc")
    assert loaded.ids == [f"t{i}" for i in range(5)]
    assert all(t.env == "calc" for t in loaded) and loaded[3].answer == 3


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"id": "a", "prompt": "x"}', "{oops"], "tasks.jsonl:2: invalid JSON"),
        (
            ['{"id": "a", "prompt": "x"}', "", '{"id": "b"}'],
            "tasks.jsonl:3: field 'prompt': Field required",
        ),
        (
            ['{"id": "a", "prompt": 3}'],
            "tasks.jsonl:1: field 'prompt': Input should be a valid string",
        ),
        (
            ['{"id": "a", "prompt": "x", "colour": 1}'],
            "tasks.jsonl:1: field 'colour': Extra inputs",
        ),
        (
            ['{"id": "a", "prompt": "x"}', '{"id": "a", "prompt": "y"}'],
            "tasks.jsonl:2: field 'id': duplicate task id 'a' (first on line 1)",
        ),
        (["[1, 2]"], "tasks.jsonl:1: a task must be a JSON object, got list"),
    ],
)
def test_jsonl_errors_name_file_line_and_field(
    tmp_path: Path, lines: list[str], message: str
) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as err:
        TaskSet.from_jsonl(path)
    assert message in str(err.value)


def test_missing_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot read task file"):
        TaskSet.from_jsonl(tmp_path / "none.jsonl")


def test_from_generator_is_deterministic() -> None:
    a = TaskSet.from_generator(calculator.generate_tasks, 30, seed=3)
    b = TaskSet.from_generator(calculator.generate_tasks, 30, seed=3)
    c = TaskSet.from_generator(calculator.generate_tasks, 30, seed=4)
    assert a.ids == b.ids != c.ids
    assert [t.model_dump() for t in a] == [t.model_dump() for t in b]


def test_generated_splits_never_share_a_problem_whatever_the_seeds() -> None:
    train = {
        json.dumps([t.prompt, t.answer])
        for s in range(3)
        for t in calculator.generate_tasks(200, seed=s)
    }
    test = {
        json.dumps([t.prompt, t.answer])
        for s in range(3)
        for t in calculator.generate_tasks(40, seed=s, split="test")
    }
    assert train.isdisjoint(test)


def test_generate_unique_reports_an_exhausted_generator() -> None:
    def only_two(rng: object) -> Task:
        import random

        assert isinstance(rng, random.Random)
        return Task(id="d", prompt=str(rng.randint(0, 1)))

    with pytest.raises(DataError, match="could only generate"):
        generate_unique("tiny", only_two, 5, seed=0, split="train", test_fraction=0.0)
    assert content_split("anything", 0.0) == "train" and content_split("anything", 1.0) == "test"
