"""TRL's vision-language dataset format: ``{messages, images, tools}``.

Messages are OpenAI-shaped, every content a list of parts (as TRL's vision datasets have it,
and one type per column for Parquet); an image is a ``{"type": "image"}`` placeholder, and the ``images`` column holds the images in the order their placeholders
appear, each as ``{"bytes", "path"}`` (the storage form of a ``datasets`` ``Image`` column, which
Parquet keeps as is; JSON lines carry the bytes as base64 text).
"""

from __future__ import annotations

from typing import Any

from trajforge.errors import DataError
from trajforge.formats.images import image_column_entry, image_from_column
from trajforge.formats.openai_chat import from_openai_chat, message_to_openai
from trajforge.schema import ImagePart, TextPart, Trajectory


def to_vision_language(traj: Trajectory) -> dict[str, Any]:
    """The trajectory as a TRL vision-language record."""
    images: list[dict[str, Any]] = []
    messages = []
    for message in traj.messages:
        out = message_to_openai(message.model_copy(update={"content": ""}))
        content = message.content if isinstance(message.content, list) else [message.content]
        out["content"] = [_placeholder(part, images) for part in content if part]
        messages.append(out)
    return {"messages": messages, "images": images, "tools": [t.to_openai() for t in traj.tools]}


def from_vision_language(record: dict[str, Any], **fields: Any) -> Trajectory:
    """A TRL vision-language record as a trajectory: each ``image`` placeholder takes the next
    image of the ``images`` column; ``DataError`` when they do not pair up."""
    raw_messages, raw_images = record.get("messages"), record.get("images") or []
    if not isinstance(raw_messages, list) or not isinstance(raw_images, list):
        raise DataError("messages, images: expected lists")
    images = iter(enumerate(raw_images))
    messages = [_with_images(m, i, images) for i, m in enumerate(raw_messages)]
    left = sum(1 for _ in images)
    if left:
        raise DataError(f"images: {left} image(s) have no image placeholder in the messages")
    data = {"messages": messages, "tools": record.get("tools") or []}
    return from_openai_chat(data, **fields)


def _placeholder(part: str | TextPart | ImagePart, images: list[dict[str, Any]]) -> dict[str, Any]:
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if isinstance(part, ImagePart):
        images.append(image_column_entry(part))
        return {"type": "image"}
    return {"type": "text", "text": part.text}


def _with_images(raw: Any, index: int, images: Any) -> Any:
    content = raw.get("content") if isinstance(raw, dict) else None
    if not isinstance(content, list):
        return raw
    parts = []
    for k, part in enumerate(content):
        if isinstance(part, dict) and part.get("type") == "image":
            taken = next(images, None)
            if taken is None:
                raise DataError(f"messages.{index}.content.{k}: an image placeholder with no image")
            position, entry = taken
            url = image_from_column(entry, f"images.{position}").data_url()
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            parts.append(part)
    return {**raw, "content": parts}
