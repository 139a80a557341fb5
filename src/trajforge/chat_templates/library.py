"""Real chat templates of other model families, read from llama.cpp's sources as the
``llama-cpp-python`` sdist on PyPI ships them (``vendor/llama.cpp/models/templates``).

They are fetched once, at setup (``make setup`` runs
``python -m trajforge.chat_templates.library``), into the user cache: the sdist is downloaded
with pip (no build), the ``.jinja`` files are extracted from it and the archive is dropped. Nothing is copied into the repository and nothing
is fetched at run time: ``library_dir`` only says where they are, or that they are missing.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from trajforge.chat_templates.prefix import ChatTemplate
from trajforge.errors import ConfigError
from trajforge.policy import cache_root

LLAMA_CPP_PYTHON = "0.3.36"
_MEMBERS = "/vendor/llama.cpp/models/templates/"
_STAMP = ".complete"


@dataclass(frozen=True)
class LibraryTemplate:
    """A template of the library: its file and the special tokens its model uses."""

    name: str
    """The file's name in llama.cpp's ``models/templates`` without ``.jinja``."""
    family: str
    bos_token: str
    eos_token: str
    why: str
    """What it shows (why it is in the list)."""


LIBRARY: tuple[LibraryTemplate, ...] = (
    LibraryTemplate(
        "Qwen-Qwen2.5-7B-Instruct", "Qwen 2.5", "", "<|im_end|>", "ChatML, Hermes-style tool calls"
    ),
    LibraryTemplate("Qwen-Qwen3-0.6B", "Qwen 3", "", "<|im_end|>", "drops past turns' thinking"),
    LibraryTemplate(
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
        "DeepSeek R1",
        "<｜begin▁of▁sentence｜>",
        "<｜end▁of▁sentence｜>",
        "opens thinking in the generation prompt, strips it from past turns",
    ),
    LibraryTemplate(
        "meta-llama-Llama-3.1-8B-Instruct",
        "Llama 3.1",
        "<|begin_of_text|>",
        "<|eot_id|>",
        "JSON tool calls, one call a turn",
    ),
    LibraryTemplate(
        "mistralai-Mistral-Nemo-Instruct-2407",
        "Mistral",
        "<s>",
        "</s>",
        "its own [TOOL_CALLS] syntax; system prompt and tools placed at the last user turn",
    ),
    LibraryTemplate("google-gemma-2-2b-it", "Gemma 2", "<bos>", "<eos>", "no system role"),
    LibraryTemplate(
        "microsoft-Phi-3.5-mini-instruct", "Phi 3.5", "<s>", "<|endoftext|>", "plain turns"
    ),
    LibraryTemplate(
        "openai-gpt-oss-120b",
        "gpt-oss",
        "<|startoftext|>",
        "<|return|>",
        "harmony channels; analysis dropped from past turns",
    ),
)


def library_dir() -> Path:
    """Where the fetched templates live (``<cache>/chat-templates/llama-cpp-python-<version>``)."""
    return cache_root() / "chat-templates" / f"llama-cpp-python-{LLAMA_CPP_PYTHON}"


def is_fetched(folder: Path | None = None) -> bool:
    return ((folder or library_dir()) / _STAMP).is_file()


def library_template(entry: LibraryTemplate, folder: Path | None = None) -> ChatTemplate:
    """``entry``'s template, read from the fetched library."""
    path = (folder or library_dir()) / f"{entry.name}.jinja"
    if not path.is_file():
        raise ConfigError(
            f"chat template {path} is not fetched (run: python -m trajforge.chat_templates.library)"
        )
    return ChatTemplate(
        f"llama.cpp {entry.name}", path.read_text(), entry.bos_token, entry.eos_token
    )


def extract(sdist: Path, folder: Path) -> int:
    """Extract the ``.jinja`` files of llama.cpp's ``models/templates`` from ``sdist`` into
    ``folder``, flat; how many were found."""
    folder.mkdir(parents=True, exist_ok=True)
    found = 0
    with tarfile.open(sdist, "r:gz") as archive:
        for member in archive.getmembers():
            name = member.name
            if member.isfile() and _MEMBERS in name and name.endswith(".jinja"):
                source = archive.extractfile(member)
                if source is not None:
                    (folder / Path(name).name).write_bytes(source.read())
                    found += 1
    if found == 0:
        raise ConfigError(f"{sdist} holds no llama.cpp chat templates under {_MEMBERS}")
    (folder / _STAMP).write_text(f"{found} templates from {sdist.name}\n")
    return found


def fetch(folder: Path | None = None) -> Path:
    """Download the pinned sdist with pip (no build, no dependencies) and extract its chat
    templates into ``folder`` (the library's), unless they are there already."""
    folder = folder or library_dir()
    if is_fetched(folder):
        return folder
    with tempfile.TemporaryDirectory(prefix="trajforge-sdist-") as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--dest",
                tmp,
                f"llama-cpp-python=={LLAMA_CPP_PYTHON}",
            ],
            check=True,
        )
        sdists = sorted(Path(tmp).glob("*.tar.gz"))
        if not sdists:
            raise ConfigError(f"pip downloaded no sdist of llama-cpp-python=={LLAMA_CPP_PYTHON}")
        extract(sdists[0], folder)
    return folder


if __name__ == "__main__":
    print(f"chat templates in {fetch()}")
