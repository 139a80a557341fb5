"""Image parts in message content: checked by magic bytes, size and hash; text-only messages
stay plain strings."""

from __future__ import annotations

import hashlib

import pytest
from pydantic import ValidationError

from image_samples import image_trajectory, png_bytes
from trajforge.formats.jsonl import format_validation_error
from trajforge.schema import (
    MAX_IMAGE_BYTES,
    ImagePart,
    Message,
    Role,
    TextPart,
    Trajectory,
    labelled_text,
    refuse_images,
    sniff_media_type,
)

JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 20
WEBP = b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 8


def test_sniff_media_types() -> None:
    assert sniff_media_type(png_bytes()) == "image/png"
    assert sniff_media_type(JPEG) == "image/jpeg"
    assert sniff_media_type(WEBP) == "image/webp"
    assert sniff_media_type(b"GIF89a....") is None


def test_from_bytes_records_type_size_and_hash() -> None:
    data = png_bytes(7)
    part = ImagePart.from_bytes(data)
    assert (part.media_type, part.size) == ("image/png", len(data))
    assert part.sha256 == hashlib.sha256(data).hexdigest()
    assert part.data_url().startswith("data:image/png;base64,")


def test_from_bytes_refuses_what_is_not_an_image() -> None:
    with pytest.raises(ValueError, match="not a PNG, JPEG or WebP"):
        ImagePart.from_bytes(b"GIF89a not supported")
    with pytest.raises(ValueError, match="declared image/jpeg but the bytes are image/png"):
        ImagePart.from_bytes(png_bytes(), "image/jpeg")


def test_json_round_trip_keeps_equal_bytes() -> None:
    traj = image_trajectory(png_bytes(1), png_bytes(2))
    back = Trajectory.model_validate_json(traj.model_dump_json())
    assert back == traj
    assert [p.data for p in back.messages[0].images] == [png_bytes(1), png_bytes(2)]
    assert Trajectory.model_validate(traj.model_dump(mode="json")) == traj


def test_text_only_content_stays_a_string() -> None:
    msg = Message.model_validate({"role": "user", "content": "hi"})
    assert msg.content == "hi" and msg.text == "hi" and msg.images == []
    assert Message.model_validate_json(msg.model_dump_json()).content == "hi"


def test_text_of_parts_joins_text_only() -> None:
    msg = image_trajectory(png_bytes()).messages[0]
    msg = msg.model_copy(update={"content": [*msg.content, TextPart(text="Be brief.")]})
    assert msg.text == "What is shown?\nBe brief."
    assert len(msg.images) == 1


def _record_with(**part: object) -> dict[str, object]:
    record = image_trajectory(png_bytes()).model_dump(mode="json")
    image = record["messages"][0]["content"][1]  # type: ignore[index]
    image.update({"data": ImagePart.from_bytes(png_bytes()).data_url().split(",")[1]})
    image.update(part)
    return record


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"media_type": "image/webp"}, "declared image/webp but the bytes are image/png"),
        ({"sha256": "0" * 64}, "sha256 does not match the bytes"),
        ({"size": 3}, "size says 3 bytes but the data has"),
        ({"size": MAX_IMAGE_BYTES + 1}, "over the 10485760-byte image limit"),
        ({"media_type": "image/gif"}, "part 1.media_type: Input should be 'image/png'"),
        ({"data": "!!"}, "part 1.data: not valid base64"),
        ({"type": "video"}, "part 1: Input tag 'video'"),
    ],
)
def test_broken_image_is_one_line_naming_the_message(change: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError) as info:
        Trajectory.model_validate(_record_with(**change))
    line = format_validation_error(info.value, "f.jsonl:1")
    assert "\n" not in line
    assert line.startswith("f.jsonl:1: messages.0")
    assert says in line


def test_refuse_images_names_the_consumer_and_message() -> None:
    traj = image_trajectory(png_bytes())
    with pytest.raises(ValueError, match=r"messages\[0\]: the SmolLM2 renderer handles text only"):
        refuse_images(traj.messages, "the SmolLM2 renderer")
    refuse_images([Message(role=Role.USER, content="plain")], "anything")


def test_text_views_label_each_image() -> None:
    msg = image_trajectory(png_bytes(3)).messages[0]
    image = msg.images[0]
    assert labelled_text(msg.content) == (
        f"What is shown?\n[image image/png, {image.size} bytes, sha256 {image.sha256[:12]}]"
    )
    assert labelled_text("plain") == "plain"
