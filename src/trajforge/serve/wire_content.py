"""Content parts as every wire API sends them: a base64 image as the ``ImagePart`` all routes
record (URLs are never fetched), text-only content as one string, and a user turn that also
answers tool calls as the tool messages, then the user message."""

from __future__ import annotations

import base64
import binascii

from trajforge.schema import Content, ImagePart, Message, Role, TextPart
from trajforge.serve.wire import WireError


def image_from_base64(data: str, media_type: str | None, where: str) -> ImagePart:
    """The image part of base64 ``data`` (standard or URL-safe alphabet), a 400 naming
    ``where`` when it is no base64 or no image the models take."""
    try:
        raw = base64.b64decode(data.replace("-", "+").replace("_", "/"), validate=True)
    except binascii.Error:
        raise WireError(f"{where}.data: not valid base64", param=f"{where}.data") from None
    try:
        return ImagePart.from_bytes(raw, media_type)
    except ValueError as exc:
        raise WireError(f"{where}: {str(exc).removeprefix('image: ')}", param=where) from None


def content_of(parts: list[TextPart | ImagePart]) -> Content:
    """Text-only content as one string, as every route records it."""
    if all(isinstance(p, TextPart) for p in parts):
        return "".join(p.text for p in parts if isinstance(p, TextPart))
    return parts


def user_turn(results: list[Message], parts: list[TextPart | ImagePart]) -> list[Message]:
    """A user turn that carries tool results and content: the results first (tool messages must
    follow the calls they answer), then the text and images as one user message, if any."""
    if not parts:
        return results
    return [*results, Message(role=Role.USER, content=content_of(parts))]
