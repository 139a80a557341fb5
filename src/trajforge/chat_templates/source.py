"""Where a chat template to check comes from: a model trajforge loads, a GGUF file's metadata, a
tokenizer_config.json, or a Jinja file; and the tokenizer its renderings are counted in."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gguf import GGUFReader

from trajforge.chat_templates.prefix import ChatTemplate
from trajforge.errors import ConfigError
from trajforge.policy import SMOLLM2_NAMES, tokenizer_for

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

STAND_IN = "embedded"
"""The tokenizer a template file is counted in when none is named (SmolLM2's)."""
_TEMPLATE_SUFFIXES = frozenset({".jinja", ".j2", ".gguf", ".json"})


def _pick(template: Any, where: str) -> str:
    """A template string out of a tokenizer's ``chat_template`` (a string, or named templates
    of which the tool-use one is preferred, as the renderer does)."""
    if isinstance(template, list):
        template = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default")
    if not isinstance(template, str) or not template:
        raise ConfigError(f"{where} has no chat template")
    return template


def _gguf_string(reader: GGUFReader, key: str) -> str | None:
    field = reader.get_field(key)
    return None if field is None else str(field.contents())


def _gguf_token(reader: GGUFReader, key: str) -> str:
    """The text of the special token whose id the GGUF stores under ``key`` ("" if none)."""
    found = reader.get_field(key)
    tokens = reader.get_field("tokenizer.ggml.tokens")
    if found is None or tokens is None:
        return ""
    return str(tokens.contents(int(found.contents())))


def gguf_template(path: Path) -> ChatTemplate:
    """The template in a GGUF file's metadata (``tokenizer.chat_template``), with its BOS and
    EOS tokens; only the metadata is read, not the weights."""
    reader = GGUFReader(path)
    text = _gguf_string(reader, "tokenizer.chat_template")
    return ChatTemplate(
        source=str(path),
        text=_pick(text, f"GGUF file {path}"),
        bos_token=_gguf_token(reader, "tokenizer.ggml.bos_token_id"),
        eos_token=_gguf_token(reader, "tokenizer.ggml.eos_token_id"),
    )


def _special(config: dict[str, Any], key: str) -> str:
    token = config.get(key) or ""
    return str(token.get("content", "")) if isinstance(token, dict) else str(token)


def file_template(path: Path, bos_token: str, eos_token: str) -> ChatTemplate:
    """The template in ``path``: a GGUF file, a tokenizer_config.json, or Jinja text."""
    if not path.is_file():
        raise ConfigError(f"template file {path} does not exist")
    if path.suffix == ".gguf":
        return gguf_template(path)
    if path.suffix == ".json":
        try:
            config = json.loads(path.read_text())
        except ValueError as exc:
            raise ConfigError(f"{path} is not JSON: {exc}") from None
        return ChatTemplate(
            source=str(path),
            text=_pick(config.get("chat_template"), str(path)),
            bos_token=bos_token or _special(config, "bos_token"),
            eos_token=eos_token or _special(config, "eos_token"),
        )
    return ChatTemplate(str(path), path.read_text(), bos_token, eos_token)


def _tokenizer(name: str) -> PreTrainedTokenizerBase:
    folder = Path(name).expanduser()
    if name not in SMOLLM2_NAMES and not (folder / "tokenizer_config.json").is_file():
        raise ConfigError(
            f"{name!r} is neither a template file nor a model here (one of "
            f"{', '.join(sorted(SMOLLM2_NAMES))}, or a folder with a tokenizer_config.json)"
        )
    found = tokenizer_for(name)
    if found is None:
        raise ConfigError(f"model {name!r} has no tokenizer here")
    return found


def _special_text(tokenizer: PreTrainedTokenizerBase, attribute: str) -> str:
    token = getattr(tokenizer, attribute, None)
    return token if isinstance(token, str) else ""


@dataclass(frozen=True)
class Loaded:
    template: ChatTemplate
    tokenizer: PreTrainedTokenizerBase
    tokenizer_name: str
    own_tokenizer: bool
    """Whether ``tokenizer`` is the template's model's (not a stand-in)."""


def load(ref: str, tokenizer: str | None, bos_token: str = "", eos_token: str = "") -> Loaded:
    """The template of ``ref`` (a model or a template file) and the tokenizer to count in.

    A model brings its own tokenizer; a template file is counted in ``tokenizer`` (a model
    name or folder, taken as the template's own), else in SmolLM2's as a stand-in, with which
    only text breaks count."""
    path = Path(ref).expanduser()
    if path.suffix in _TEMPLATE_SUFFIXES or path.is_file():
        template = file_template(path, bos_token, eos_token)
        if tokenizer:
            return Loaded(template, _tokenizer(tokenizer), tokenizer, True)
        return Loaded(template, _tokenizer(STAND_IN), f"{STAND_IN} (stand-in)", False)
    own = _tokenizer(ref)
    template = ChatTemplate(
        source=ref,
        text=_pick(own.chat_template, f"model {ref!r}"),
        bos_token=bos_token or _special_text(own, "bos_token"),
        eos_token=eos_token or _special_text(own, "eos_token"),
    )
    if tokenizer:
        return Loaded(template, _tokenizer(tokenizer), tokenizer, True)
    return Loaded(template, own, ref, True)
