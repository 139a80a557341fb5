"""One word per thing in the package tree: a name that means one thing in one place does not
mean another beside it (``memory.py`` beside ``memory_bank/``, chat-template checks called
``templates`` beside the viewer's HTML ``templates/``)."""

from __future__ import annotations

from itertools import permutations
from pathlib import Path

import trajforge

SRC = Path(trajforge.__file__).parent


def _is_package(path: Path) -> bool:
    return path.is_dir() and (path / "__init__.py").exists()


def test_no_top_level_name_is_another_ones_with_more_words() -> None:
    names = {
        path.stem
        for path in SRC.iterdir()
        if (path.suffix == ".py" and not path.stem.startswith("__")) or _is_package(path)
    }
    assert {"memory", "ram", "chat_templates"} <= names
    clashes = [(a, b) for a, b in permutations(sorted(names), 2) if b.startswith(f"{a}_")]
    assert not clashes, f"one name inside another: {clashes}"


def test_no_python_name_is_also_a_data_folders() -> None:
    folders = {
        path.name
        for path in SRC.rglob("*")
        if path.is_dir() and not _is_package(path) and path.name != "__pycache__"
    }
    assert "templates" in folders  # the viewer's and the report's HTML
    python = {p.name for p in SRC.rglob("*") if _is_package(p)}
    python |= {p.stem for p in SRC.rglob("*.py")}
    assert not python & folders, f"Python names that are data folders too: {python & folders}"
