"""Message content to and from ATIF content parts (v1.6 images, v1.8 audio).

An image part is written as an ATIF ``image`` part whose ``source.path`` is a base64 data URL
(ATIF's path "can be a relative or absolute file path, or a URL"), so a document carries its
images with equal bytes. On the way in, a data URL or a file (a path relative to the document's
folder, as Harbor's agents save screenshots under ``images/``) becomes an image part; what
trajforge cannot hold as one (a remote URL, never fetched; a GIF; a file that is not there;
audio) stays in the text as ``[image: path]`` or ``[audio: path]``, and a missing or unreadable
image file is noted in the document's ``dropped`` list.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trajforge.errors import DataError
from trajforge.formats.atif_models import ContentPart, ImageSource
from trajforge.formats.images import image_from_data_url
from trajforge.formats.imported import text_or_parts
from trajforge.schema import Content, ImagePart, TextPart


def content_to_atif(content: Content) -> str | list[dict[str, Any]]:
    """Message content as ATIF writes it: a string, or text and image parts."""
    if isinstance(content, str):
        return content
    return [
        {"type": "text", "text": part.text}
        if isinstance(part, TextPart)
        else {"type": "image", "source": {"media_type": part.media_type, "path": part.data_url()}}
        for part in content
    ]


def content_from_atif(
    content: str | list[ContentPart] | None, where: str, base: Path | None, dropped: list[str]
) -> Content:
    """ATIF content as a message's: text parts joined by newlines when no image is held,
    else text and image parts."""
    if content is None or isinstance(content, str):
        return content or ""
    parts: list[TextPart | ImagePart] = []
    for k, part in enumerate(content):
        image = _image(part.source, f"{where}.{k}.source.path", base, dropped)
        if image is not None:
            parts.append(image)
        elif part.text is not None:
            parts.append(TextPart(text=part.text))
        else:
            parts.append(TextPart(text=f"[{part.type}: {part.source.path if part.source else ''}]"))
    return text_or_parts(parts, "\n")


def _image(source: Any, where: str, base: Path | None, dropped: list[str]) -> ImagePart | None:
    if not isinstance(source, ImageSource) or source.media_type == "image/gif":
        return None
    if source.path.startswith("data:"):
        return image_from_data_url(source.path, where)
    if "://" in source.path:
        return None
    path = Path(source.path)
    if not path.is_absolute():
        if base is None:
            dropped.append(f"{where}: {source.path} is relative and the document has no folder")
            return None
        path = base / path
    try:
        data = path.read_bytes()
    except OSError as exc:
        dropped.append(f"{where}: cannot read {source.path}: {exc.strerror or exc}")
        return None
    try:
        return ImagePart.from_bytes(data, source.media_type)
    except ValueError as exc:
        raise DataError(f"{where}: {source.path}: {str(exc).removeprefix('image: ')}") from None
