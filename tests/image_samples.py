"""Small real images for the image-part tests: a PNG written by hand (zlib), and trajectories
whose user turns carry them."""

from __future__ import annotations

import struct
import zlib

from trajforge.schema import ImagePart, Message, Role, Task, TextPart, Trajectory


def png_bytes(shade: int = 0) -> bytes:
    """A valid 2x2 grey PNG; ``shade`` changes the pixels, so the bytes and hash differ."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0)
    rows = b"".join(b"\x00" + bytes([shade % 256, (shade + 1) % 256]) for _ in range(2))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def image_trajectory(*images: bytes, task_id: str = "t1") -> Trajectory:
    """A user turn with a question and ``images``, then an assistant answer."""
    parts: list[TextPart | ImagePart] = [TextPart(text="What is shown?")]
    parts.extend(ImagePart.from_bytes(data) for data in images)
    return Trajectory(
        task=Task(id=task_id, prompt="What is shown?"),
        messages=[
            Message(role=Role.USER, content=parts),
            Message(role=Role.ASSISTANT, content="A grey square."),
        ],
    )
