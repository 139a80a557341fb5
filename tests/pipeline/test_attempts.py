"""A stage's folder is its current attempt; earlier ones are set aside without their
checkpoints and pruned to a keep count; a run folder's disk use is counted once per file."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajforge.pipeline.attempts import (
    ATTEMPTS_DIR,
    disk_use,
    earlier_attempts,
    set_aside,
    size_text,
)


def _attempt(run_dir: Path, stage: str, marker: str) -> None:
    folder = run_dir / stage
    (folder / "final").mkdir(parents=True)
    (folder / "final" / "weights").write_text(marker)
    (folder / "checkpoints" / "step-0000002").mkdir(parents=True)
    (folder / "checkpoints" / "step-0000002" / "state").write_text("x" * 1000)


def test_set_aside_moves_the_folder_drops_checkpoints_and_keeps_the_latest(tmp_path: Path) -> None:
    for attempt in range(3):
        _attempt(tmp_path, "sft", f"attempt {attempt}")
        aside = set_aside(tmp_path, "sft", attempt, keep=2)
        assert aside == tmp_path / ATTEMPTS_DIR / f"sft.{attempt}"
        assert not (tmp_path / "sft").exists()
        assert (aside / "final" / "weights").read_text() == f"attempt {attempt}"
        assert not (aside / "checkpoints").exists()
    assert [p.name for p in earlier_attempts(tmp_path, "sft")] == ["sft.1", "sft.2"]
    assert earlier_attempts(tmp_path, "rl") == []
    # Another stage's attempts are its own; keep 0 deletes the folder outright.
    _attempt(tmp_path, "sft.x", "other")
    assert set_aside(tmp_path, "sft.x", 0, keep=0) is None
    assert not (tmp_path / "sft.x").exists()
    assert [p.name for p in earlier_attempts(tmp_path, "sft")] == ["sft.1", "sft.2"]
    # A stage that never made a folder (an eval) sets nothing aside.
    assert set_aside(tmp_path, "base", 0, keep=1) is None


def test_disk_use_counts_each_file_once(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 1500)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").write_bytes(b"y" * 500)
    (tmp_path / "sub" / "hard").hardlink_to(tmp_path / "a")
    assert disk_use(tmp_path) == 2000


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 B"), (999, "999 B"), (1500, "2 KB"), (2_345_678, "2.3 MB"), (123_456_789, "123 MB"),
     (12_300_000_000, "12.3 GB")],
)  # fmt: skip
def test_size_text_reads_as_a_person_would(size: int, text: str) -> None:
    assert size_text(size) == text
