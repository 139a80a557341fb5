"""Which kind of model a name or a folder is, told without loading anything (no torch)."""

from __future__ import annotations

from pathlib import Path

TINY_VLM = "tiny-vlm"
"""The tiny vision-language model built in code (``policy.models.tiny_vlm``)."""

VISION_PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
"""What a vision-language model's folder holds beside its weights: its processor's settings."""


def is_vision_folder(folder: Path) -> bool:
    """Whether ``folder`` holds an image-text-to-text model: one saved with its processor."""
    return any((folder / name).is_file() for name in VISION_PROCESSOR_FILES)
