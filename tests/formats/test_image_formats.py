"""Image parts through the formats: OpenAI chat data URLs and TRL's vision-language format carry
them with equal bytes; every format without a place for them refuses them by name (every format's
file round trip: ``test_image_round_trips``)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from image_samples import image_trajectory, png_bytes
from trajforge.errors import DataError
from trajforge.formats import FORMATS, detect_format, load_records, write_records
from trajforge.formats.adp import to_adp
from trajforge.formats.openai_chat import from_openai_chat, to_openai_chat
from trajforge.formats.otel_export import to_otlp
from trajforge.formats.responses import from_responses, to_responses
from trajforge.formats.sharegpt import from_sharegpt, to_sharegpt
from trajforge.formats.trl import from_prompt_completion, to_prompt_completion
from trajforge.formats.trl_vision import from_vision_language, to_vision_language
from trajforge.schema import Message, Role, Trajectory


def _hashes(traj: Trajectory) -> list[str]:
    return [part.sha256 for m in traj.messages for part in m.images]


def _bytes(traj: Trajectory) -> list[bytes | None]:
    return [part.data for m in traj.messages for part in m.images]


def test_openai_chat_round_trip_keeps_equal_bytes() -> None:
    traj = image_trajectory(png_bytes(1), png_bytes(2))
    record = to_openai_chat(traj)
    parts = record["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url", "image_url"]
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")
    back = from_openai_chat(record)
    assert back.messages == traj.messages
    assert _bytes(back) == [png_bytes(1), png_bytes(2)]
    assert back.task.prompt == "What is shown?"


def test_text_only_openai_content_stays_a_string() -> None:
    record = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert from_openai_chat(record).messages[0].content == "hi"


def _user(part: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, part]}]}


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("https://example.com/a.png", "only base64 data URLs are taken for images"),
        ("data:image/png;base64,@@", "the data URL's base64 does not decode"),
        (
            "data:image/gif;base64," + base64.b64encode(b"GIF89a....").decode(),
            "media type 'image/gif' is not one of PNG, JPEG, WebP",
        ),
        (
            "data:image/jpeg;base64," + base64.b64encode(png_bytes()).decode(),
            "declared image/jpeg but the bytes are image/png",
        ),
    ],
)
def test_bad_image_urls_name_the_part(url: str, says: str) -> None:
    with pytest.raises(DataError, match=r"^messages\.0\.content\.1\.image_url: ") as info:
        from_openai_chat(_user({"type": "image_url", "image_url": {"url": url}}))
    assert says in str(info.value)


def test_trl_prompt_completion_carries_images() -> None:
    traj = image_trajectory(png_bytes(3))
    back = from_prompt_completion(to_prompt_completion(traj))
    assert _hashes(back) == _hashes(traj)


def test_trl_vision_record_has_placeholders_and_an_images_column() -> None:
    traj = image_trajectory(png_bytes(1), png_bytes(2))
    record = to_vision_language(traj)
    assert record["messages"][0]["content"] == [
        {"type": "text", "text": "What is shown?"},
        {"type": "image"},
        {"type": "image"},
    ]
    assert record["messages"][1]["content"] == [{"type": "text", "text": "A grey square."}]
    assert record["images"] == [
        {"bytes": png_bytes(1), "path": None},
        {"bytes": png_bytes(2), "path": None},
    ]
    assert from_vision_language(record).messages == traj.messages


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_trl_vision_files_round_trip_with_equal_bytes(tmp_path: Path, suffix: str) -> None:
    trajs = [
        image_trajectory(png_bytes(1), task_id="a"),
        image_trajectory(png_bytes(2), png_bytes(1), task_id="b"),
    ]
    path = tmp_path / f"vl{suffix}"
    write_records(path, trajs, FORMATS.get("trl-vision"))
    fmt = detect_format(path)
    assert fmt.name == "trl-vision"
    back = load_records(path, fmt)
    assert [_bytes(t) for t in back] == [_bytes(t) for t in trajs]
    assert [_hashes(t) for t in back] == [_hashes(t) for t in trajs]


def test_trl_vision_placeholders_and_images_must_pair_up() -> None:
    record = to_vision_language(image_trajectory(png_bytes(1)))
    with pytest.raises(DataError, match=r"^images: 1 image\(s\) have no image placeholder"):
        from_vision_language({**record, "images": record["images"] * 2})
    with pytest.raises(DataError, match=r"^messages.0.content.1: an image placeholder with no"):
        from_vision_language({**record, "images": []})


@pytest.mark.parametrize(
    ("write", "name"),
    [(to_adp, "ADP"), (to_otlp, "OTel export")],
)
def test_text_only_formats_refuse_images_by_name(
    write: Callable[[Trajectory], Any], name: str
) -> None:
    traj = image_trajectory(png_bytes())
    with pytest.raises(DataError) as info:
        write(traj)
    assert str(info.value) == (
        f"trajectory {traj.id}: messages[0]: the {name} format handles text only and this "
        "message has an image part"
    )


def test_openai_parquet_mixing_text_and_image_content_is_refused_clearly(tmp_path: Path) -> None:
    trajs = [image_trajectory(png_bytes(1))]
    with pytest.raises(DataError, match="written as Parquet by trl-vision"):
        write_records(tmp_path / "o.parquet", trajs, FORMATS.get("openai"))
    assert not list(tmp_path.iterdir())  # nothing left behind
    write_records(tmp_path / "o.jsonl", trajs, FORMATS.get("openai"))
    assert _bytes(load_records(tmp_path / "o.jsonl", FORMATS.get("openai"))[0]) == [png_bytes(1)]


def test_sharegpt_writes_llava_style_image_tokens_and_an_images_list() -> None:
    traj = image_trajectory(png_bytes(1), png_bytes(2))
    record = to_sharegpt(traj)
    assert record["conversations"][0] == {"from": "human", "value": "What is shown?<image><image>"}
    assert record["images"] == [
        {"bytes": png_bytes(1), "path": None},
        {"bytes": png_bytes(2), "path": None},
    ]
    assert from_sharegpt(record, task_id="t1").messages == traj.messages


def test_sharegpt_without_images_keeps_image_tokens_as_text() -> None:
    record = {"conversations": [{"from": "human", "value": "a <image> tag"}]}
    assert from_sharegpt(record, task_id="t").messages[0].content == "a <image> tag"


def test_sharegpt_refuses_what_it_cannot_tell_apart() -> None:
    traj = image_trajectory(png_bytes(1))
    system = Message(role=Role.SYSTEM, content=traj.messages[0].content)
    with pytest.raises(DataError, match=r"messages\[0\]: the ShareGPT format's system field"):
        to_sharegpt(traj.model_copy(update={"messages": [system, *traj.messages]}))
    literal = Message(role=Role.USER, content="type <image> here")
    with pytest.raises(DataError, match=r"messages\[2\]: its text holds <image>"):
        to_sharegpt(traj.model_copy(update={"messages": [*traj.messages, literal]}))
    record = to_sharegpt(traj)
    with pytest.raises(DataError, match=r"^images: 1 image\(s\) have no <image> token"):
        from_sharegpt({**record, "images": record["images"] * 2}, task_id="t")
    with pytest.raises(
        DataError, match=r"^images.0: not valid base64 \(image paths are not read\)"
    ):
        from_sharegpt({**record, "images": ["pics/1.png"]}, task_id="t")


def test_responses_input_image_parts_round_trip_and_bad_ones_are_named() -> None:
    traj = image_trajectory(png_bytes(5))
    record = to_responses(traj)
    (text, image) = record["input"][0]["content"]
    assert text == {"type": "input_text", "text": "What is shown?"}
    assert image["type"] == "input_image" and image["image_url"].startswith("data:image/png;")
    assert from_responses(record).messages == traj.messages
    by_file = {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]}
    with pytest.raises(DataError, match=r"^input.0.content.0.image_url: an input_image needs"):
        from_responses(by_file)
