"""Image parts on the way in and out of formats: OpenAI ``image_url`` data URLs, and the one
refusal every format without a place for images gives (never dropping them silently)."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from trajforge.errors import DataError
from trajforge.schema import Content, ImagePart, TextPart, Trajectory, refuse_images

_DATA_URL = re.compile(r"^data:(?P<type>[\w.+-]+/[\w.+-]+)(?:;[^,;]*)*;base64,(?P<data>.*)$", re.S)


def refuse_images_in(traj: Trajectory, fmt: str) -> None:
    """``DataError`` when the trajectory has an image part: ``fmt`` cannot hold one."""
    try:
        refuse_images(traj.messages, f"the {fmt} format")
    except ValueError as exc:
        raise DataError(f"trajectory {traj.id}: {exc}") from None


def image_from_data_url(url: str, where: str) -> ImagePart:
    """The image a ``data:<type>;base64,...`` URL holds, checked; ``DataError`` names ``where``
    for a remote URL (never fetched) or bytes that are no PNG, JPEG or WebP."""
    match = _DATA_URL.match(url)
    if match is None:
        shown = url if len(url) <= 40 else url[:40] + "..."
        raise DataError(f"{where}: only base64 data URLs are taken for images, not {shown!r}")
    try:
        data = base64.b64decode(match["data"], validate=True)
    except binascii.Error:
        raise DataError(f"{where}: the data URL's base64 does not decode") from None
    try:
        return ImagePart.from_bytes(data, match["type"])
    except ValueError as exc:
        raise DataError(f"{where}: {str(exc).removeprefix('image: ')}") from None


def content_to_openai(content: Content) -> str | list[dict[str, Any]]:
    """Message content in the chat-completions shape: text stays a string, parts become
    ``text`` and ``image_url`` (data URL) parts."""
    if isinstance(content, str):
        return content
    return [
        {"type": "text", "text": part.text}
        if isinstance(part, TextPart)
        else {"type": "image_url", "image_url": {"url": part.data_url()}}
        for part in content
    ]


def image_column_entry(part: ImagePart) -> dict[str, Any]:
    """An image as a ``datasets`` ``Image`` column stores it: ``{"bytes", "path"}`` (Parquet
    keeps the bytes as they are; JSON lines carry them as base64 text)."""
    if part.data is None:
        raise DataError(f"image {part.sha256[:12]}: its bytes are not loaded")
    return {"bytes": part.data, "path": None}


def image_from_column(entry: Any, where: str) -> ImagePart:
    """The image of an ``images`` column entry: ``{"bytes": ...}`` (bytes, or base64 text) or
    the bytes themselves; ``DataError`` names ``where`` for anything else (a path is not read)."""
    data = entry.get("bytes") if isinstance(entry, dict) else entry
    if isinstance(data, str):
        try:
            data = base64.b64decode(data, validate=True)
        except binascii.Error:
            field = ".bytes" if isinstance(entry, dict) else ""
            raise DataError(
                f"{where}{field}: not valid base64 (image paths are not read)"
            ) from None
    if not isinstance(data, bytes):
        raise DataError(f"{where}: expected {{'bytes': ...}} with the image's bytes")
    try:
        return ImagePart.from_bytes(data)
    except ValueError as exc:
        raise DataError(f"{where}: {exc}") from None


def image_url_part(part: dict[str, Any], where: str) -> ImagePart:
    """An OpenAI ``image_url`` part (``{"url": ...}`` or the bare URL string) as an image."""
    url = part.get("image_url")
    if isinstance(url, dict):
        url = url.get("url")
    if not isinstance(url, str):
        raise DataError(f"{where}.image_url: expected {{'url': 'data:...'}}")
    return image_from_data_url(url, f"{where}.image_url")
