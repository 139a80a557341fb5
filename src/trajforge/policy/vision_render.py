"""Exact rendering of conversations with images for a vision-language model's processor.

A ``VisionRenderer`` is a ``ChatRenderer`` whose template messages keep their image parts
(``{"type": "image"}`` beside ``{"type": "text", ...}``, the form Hugging Face processors'
chat templates read), and whose rendered text has each image's placeholder already expanded
the way the processor expands it for that image (LLaVA: one ``<image>`` per patch; Qwen2-VL:
one ``<|image_pad|>`` per merged patch of the image's own grid). The expansion is a pure
function of the image's bytes, so every piece of the incremental rendering (opening messages,
observation deltas, ``check``'s replay) tokenizes to the ids the model is given, placeholders
included. The pixels themselves are never stored: ``pixel_inputs`` recomputes them from the
image parts' bytes, for sampling and for training alike.
"""

from __future__ import annotations

import copy
import inspect
import io
from collections.abc import Sequence
from typing import Any

import torch
from PIL import Image
from transformers import ProcessorMixin

from trajforge.errors import ConfigError
from trajforge.policy.renderer import ChatRenderer, RenderError, ToolProtocol
from trajforge.schema import ImagePart, Message, Role, ToolSpec, content_text


def is_vision_processor(value: Any) -> bool:
    """Whether ``value`` is a processor with an image processor (not a bare tokenizer)."""
    return isinstance(value, ProcessorMixin) and getattr(value, "image_processor", None) is not None


def image_of(part: ImagePart) -> Image.Image:
    """The RGB picture of an image part's bytes."""
    if part.data is None:
        raise RenderError(f"image {part.sha256[:12]}: its bytes are not loaded")
    try:
        with Image.open(io.BytesIO(part.data)) as picture:
            return picture.convert("RGB")
    except OSError as exc:
        raise RenderError(f"image {part.sha256[:12]}: cannot be decoded: {exc}") from None


def pixel_inputs(processor: Any, images: Sequence[ImagePart]) -> dict[str, torch.Tensor]:
    """The image processor's tensors for ``images`` in order (``pixel_values``, and e.g.
    ``image_grid_thw`` for Qwen2-VL), as the model's forward takes them."""
    features = processor.image_processor(images=[image_of(p) for p in images], return_tensors="pt")
    return {k: v for k, v in features.items() if isinstance(v, torch.Tensor)}


def forward_inputs(
    model: Any, input_ids: torch.Tensor, vision: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """``vision`` for ``model``'s forward, on its device and pixels in its dtype; plus the
    image-token mask of models whose position ids need it (Qwen2-VL's ``mm_token_type_ids``,
    which their processor would have computed from the same ids)."""
    weight = next(model.parameters())
    out = {
        k: v.to(weight.device, weight.dtype if v.is_floating_point() else v.dtype)
        for k, v in vision.items()
    }
    if "mm_token_type_ids" in inspect.signature(model.forward).parameters:
        out["mm_token_type_ids"] = (input_ids == model.config.image_token_id).int()
    return out


class VisionRenderer(ChatRenderer):
    """Renders conversations with image parts through ``processor``'s chat template and
    placeholder expansion (see the module docstring).

    Args:
        processor: a Hugging Face processor with a tokenizer, an image processor, an
            ``image_token`` and a chat template that writes image parts.
        tool_protocol, parser: see ``ChatRenderer``.
    """

    def __init__(
        self,
        processor: Any,
        tool_protocol: ToolProtocol | str = ToolProtocol.AUTO,
        parser: str = "text",
    ) -> None:
        if not is_vision_processor(processor):
            raise ConfigError(
                f"a vision-language policy needs a processor with an image processor, got "
                f"{type(processor).__name__}"
            )
        image_token = getattr(processor, "image_token", None)
        if not isinstance(image_token, str):
            raise ConfigError(f"processor {type(processor).__name__} names no image_token")
        tokenizer = processor.tokenizer
        template = getattr(processor, "chat_template", None)
        if template and tokenizer.chat_template != template:
            # The processor's template is the one that writes image parts.
            tokenizer = copy.copy(tokenizer)
            tokenizer.chat_template = template
        self.processor = processor
        self.image_token = image_token
        self._expansions: dict[str, str] = {}
        super().__init__(tokenizer, tool_protocol=tool_protocol, parser=parser)

    def template_messages(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> list[dict[str, Any]]:
        """The text renderer's dicts, with each message that has images given as parts: any
        text the renderer puts before the content (a tool result's label), then the message's
        parts in their order."""
        for i, m in enumerate(messages):
            if m.images and m.role is Role.ASSISTANT:
                raise RenderError(f"message {i}: an assistant message cannot carry images")
        plain = [
            m.model_copy(update={"content": content_text(m.content)}) if m.images else m
            for m in messages
        ]
        conversation = super().template_messages(plain, tools)
        offset = len(conversation) - len(messages)  # a system message the tool prompt added
        for i, m in enumerate(messages):
            if not m.images or isinstance(m.content, str):
                continue
            entry = conversation[offset + i]
            text = content_text(m.content)
            head = str(entry["content"])[: len(str(entry["content"])) - len(text)]
            parts: list[dict[str, str]] = [{"type": "text", "text": head}] if head else []
            for part in m.content:
                if isinstance(part, ImagePart):
                    parts.append({"type": "image"})
                else:
                    parts.append({"type": "text", "text": part.text})
            entry["content"] = parts
        return conversation

    def render_text(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        add_generation_prompt: bool,
    ) -> str:
        """The template's text with every image placeholder expanded for its image."""
        text = super().render_text(messages, tools, add_generation_prompt=add_generation_prompt)
        images = [image for m in messages for image in m.images]
        pieces = text.split(self.image_token)
        if len(pieces) - 1 != len(images):
            raise RenderError(
                f"the chat template wrote {len(pieces) - 1} image placeholder(s) "
                f"{self.image_token!r} for {len(images)} image(s)"
            )
        out = [pieces[0]]
        for image, piece in zip(images, pieces[1:], strict=True):
            out += [self.expansion(image), piece]
        return "".join(out)

    def expansion(self, image: ImagePart) -> str:
        """What the processor writes for ``image``'s placeholder (kept per content hash)."""
        found = self._expansions.get(image.sha256)
        if found is None:
            ids = self.processor(
                text=self.image_token,
                images=[image_of(image)],
                add_special_tokens=False,
                return_tensors="pt",
            )["input_ids"][0]
            found = self.decode(ids.tolist())
            if self.encode(found) != ids.tolist():
                raise RenderError(
                    f"image {image.sha256[:12]}: the processor's placeholder expansion does not "
                    "tokenize back to its ids"
                )
            self._expansions[image.sha256] = found
        return found
