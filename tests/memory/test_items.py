"""The memory file: round trip, refused whole at the first bad line, items split by env."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajforge.errors import ConfigError
from trajforge.memory.items import (
    MemoryItem,
    MemoryKind,
    for_env,
    item_line,
    read_memory,
    write_memory,
)


def item(i: int, env: str = "keydoor-compact") -> MemoryItem:
    return MemoryItem(
        id=f"m{i}",
        env=env,
        title=f"title {i}",
        applies_when="a board with a door",
        lesson="get the key first",
        kind=MemoryKind.SUCCESS,
        sources=[f"traj-{i}"],
    )


def test_a_memory_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "mem.jsonl"
    assert write_memory(path, [item(1), item(2)]) == 2
    path.write_text(path.read_text() + "\n")  # blank lines are allowed
    assert read_memory(path) == [item(1), item(2)]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", ":2: not a memory item (invalid JSON"),
        ('{"id": "x"}', ":2: env: Field required"),
        (item_line(item(3)).replace('"sources": ["traj-3"]', '"sources": []'), ":2: sources:"),
        (item_line(item(1)), ":2: id 'm1' repeats the item of line 1"),
        (item_line(item(4)).replace("}", ', "extra": 1}'), ":2: extra: Extra inputs"),
    ],
)
def test_a_bad_line_refuses_the_whole_file_with_file_and_line(
    tmp_path: Path, line: str, message: str
) -> None:
    path = tmp_path / "mem.jsonl"
    path.write_text(item_line(item(1)) + line.strip() + "\n" + item_line(item(2)))
    with pytest.raises(ConfigError) as err:
        read_memory(path)
    assert str(err.value).startswith(f"{path}{message}")
    assert "\n" not in str(err.value)


def test_a_missing_file_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no memory file .*trajforge memory build"):
        read_memory(tmp_path / "none.jsonl")


def test_items_of_other_envs_are_set_aside() -> None:
    mine, others = for_env([item(1), item(2, env="calculator"), item(3)], "keydoor-compact")
    assert [i.id for i in mine] == ["m1", "m3"]
    assert [i.id for i in others] == ["m2"]
