"""Message content parts: text and images.

A message's content is a plain string or a list of parts. An image part names its media type
(PNG, JPEG or WebP), byte size and sha256 content hash; in memory it may also hold the bytes,
which the store keeps once per distinct hash and every converter carries or refuses by name.
Bytes are checked by their magic numbers, never decoded: the schema imports no image library.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    TypeAdapter,
    ValidationError,
    field_serializer,
    field_validator,
)

MAX_IMAGE_BYTES = 10 * 1024 * 1024
"""The largest image a message may hold."""

ImageMediaType = Literal["image/png", "image/jpeg", "image/webp"]
IMAGE_MEDIA_TYPES: tuple[str, ...] = ("image/png", "image/jpeg", "image/webp")

_SHA256 = r"^[0-9a-f]{64}$"

WITHOUT_IMAGE_BYTES = "without_image_bytes"
"""Serialisation context key: ``model_dump_json(context={WITHOUT_IMAGE_BYTES: True})`` writes
image parts as references (media type, size, hash) without their bytes, as the store keeps
bodies."""


class Strict(BaseModel):
    """Base for every schema model: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class TextPart(Strict):
    type: Literal["text"] = "text"
    text: str


class ImagePart(Strict):
    """One image. ``data`` is the bytes when they are at hand (JSON carries them as base64);
    a stored row keeps only the reference and the store's blob table the bytes."""

    type: Literal["image"] = "image"
    media_type: ImageMediaType
    size: int = Field(ge=0)
    sha256: str = Field(pattern=_SHA256)
    data: bytes | None = None

    @field_validator("data", mode="before")
    @classmethod
    def _from_base64(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return base64.b64decode(value, validate=True)
            except binascii.Error:
                raise ValueError("not valid base64") from None
        return value

    @field_serializer("data", when_used="json")
    def _to_base64(self, value: bytes | None, info: SerializationInfo) -> str | None:
        if value is None or (info.context or {}).get(WITHOUT_IMAGE_BYTES):
            return None
        return base64.b64encode(value).decode("ascii")

    @classmethod
    def from_bytes(cls, data: bytes, media_type: str | None = None) -> ImagePart:
        """A checked part for ``data``; ``media_type`` is sniffed from the bytes when not given."""
        declared = media_type or sniff_media_type(data)
        if declared is None:
            raise ValueError("image: the bytes are not a PNG, JPEG or WebP image")
        if declared not in IMAGE_MEDIA_TYPES:
            raise ValueError(f"image: media type {declared!r} is not one of PNG, JPEG, WebP")
        part = cls(
            media_type=declared,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            data=data,
        )
        problem = image_problem(part)
        if problem:
            raise ValueError(f"image: {problem}")
        return part

    def data_url(self) -> str:
        """``data:<media type>;base64,...`` (the OpenAI ``image_url`` form)."""
        if self.data is None:
            raise ValueError(f"image {self.sha256[:12]}: its bytes are not loaded")
        return f"data:{self.media_type};base64,{base64.b64encode(self.data).decode('ascii')}"

    def without_data(self) -> ImagePart:
        return self.model_copy(update={"data": None})


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]
Content = str | list[ContentPart]
_PARTS: TypeAdapter[list[TextPart | ImagePart]] = TypeAdapter(list[ContentPart])


def parse_parts(value: Any) -> Any:
    """A list of content parts validated with one clear error (``part j.field: why``) instead
    of the str-or-list union's pair; anything else is left to the union."""
    if not isinstance(value, list):
        return value
    try:
        return _PARTS.validate_python(value)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = [str(p) for p in err["loc"] if p not in ("text", "image")]
        why = err["msg"].removeprefix("Value error, ")
        raise ValueError(f"part {'.'.join(loc)}: {why}") from None


def sniff_media_type(data: bytes) -> str | None:
    """The media type the magic bytes say, among PNG, JPEG and WebP; ``None`` for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_problem(part: ImagePart) -> str | None:
    """What is wrong with an image part (oversized, bytes that disagree with its declared type,
    size or hash), or ``None``."""
    if part.size > MAX_IMAGE_BYTES:
        return f"{part.size} bytes is over the {MAX_IMAGE_BYTES}-byte image limit"
    if part.data is None:
        return None
    if len(part.data) != part.size:
        return f"size says {part.size} bytes but the data has {len(part.data)}"
    sniffed = sniff_media_type(part.data)
    if sniffed != part.media_type:
        found = sniffed or "not a PNG, JPEG or WebP image"
        return f"declared {part.media_type} but the bytes are {found}"
    if hashlib.sha256(part.data).hexdigest() != part.sha256:
        return "sha256 does not match the bytes"
    return None


def content_problem(content: Content) -> str | None:
    """The first image problem in ``content`` as ``content[j]: ...``, or ``None``."""
    if isinstance(content, str):
        return None
    for j, part in enumerate(content):
        if isinstance(part, ImagePart):
            problem = image_problem(part)
            if problem:
                return f"content[{j}]: {problem}"
    return None


def image_label(part: ImagePart) -> str:
    """How text views show an image: ``[image image/png, 1234 bytes, sha256 1a2b3c4d5e6f]``."""
    return f"[image {part.media_type}, {part.size} bytes, sha256 {part.sha256[:12]}]"


def content_text(content: Content) -> str:
    """The text of ``content``: the string itself, or its text parts joined by newlines."""
    if isinstance(content, str):
        return content
    return "\n".join(p.text for p in content if isinstance(p, TextPart))


def labelled_text(content: Content) -> str:
    """The text of ``content`` followed by a label per image: how text-only views show it."""
    if isinstance(content, str):
        return content
    return "\n".join([content_text(content), *map(image_label, content_images(content))]).strip()


def content_images(content: Content) -> list[ImagePart]:
    if isinstance(content, str):
        return []
    return [p for p in content if isinstance(p, ImagePart)]
