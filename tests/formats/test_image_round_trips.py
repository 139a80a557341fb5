"""Every format that is written and read, through a file: where it has a place for images they
come back with equal bytes (sha256), and where it has none the refusal names the format."""

from __future__ import annotations

from pathlib import Path

import pytest

from image_samples import image_trajectory, png_bytes
from trajforge.errors import DataError
from trajforge.formats import FORMATS, load_records, write_records
from trajforge.formats.detect import readable, writable
from trajforge.schema import ImagePart, Message, Role, TextPart, Trajectory

CARRIES = ["atif", "openai", "responses", "sharegpt", "trajforge", "trl-prompt-completion",
           "trl-vision"]  # fmt: skip
REFUSES = {"adp": "ADP", "otel": "OTel export"}


def test_every_written_and_read_format_is_named_here() -> None:
    both = [n for n in FORMATS.names() if readable(FORMATS.get(n)) and writable(FORMATS.get(n))]
    assert sorted(both) == sorted([*CARRIES, *REFUSES])


def _with_tool_images() -> Trajectory:
    """Images in a user turn and in a tool result, one of them twice."""
    traj = image_trajectory(png_bytes(1), png_bytes(2))
    screen = [TextPart(text="the screen:"), ImagePart.from_bytes(png_bytes(1))]
    call = {"id": "c1", "name": "look", "arguments": {}}
    return traj.model_copy(
        update={
            "messages": [
                traj.messages[0],
                Message(role=Role.ASSISTANT, tool_calls=[call]),  # ShareGPT keeps no text here
                Message(role=Role.TOOL, content=screen, tool_call_id="c1"),
                traj.messages[1],
            ]
        }
    )


def _images(traj: Trajectory) -> list[tuple[int, str, bytes | None]]:
    return [(i, p.sha256, p.data) for i, m in enumerate(traj.messages) for p in m.images]


@pytest.mark.parametrize("name", [*CARRIES, *REFUSES])
def test_images_round_trip_with_equal_bytes_or_are_refused_by_name(
    tmp_path: Path, name: str
) -> None:
    fmt = FORMATS.get(name)
    traj = _with_tool_images()
    path = tmp_path / f"{name}.jsonl"
    if name in REFUSES:
        with pytest.raises(DataError, match=f"the {REFUSES[name]} format handles text only"):
            write_records(path, [traj], fmt)
        assert not path.exists()
        return
    write_records(path, [traj], fmt)
    (back,) = load_records(path, fmt)
    assert _images(back) == _images(traj)
    assert [m.text for m in back.messages] == [m.text for m in traj.messages]
    assert len(_images(back)) == 3
