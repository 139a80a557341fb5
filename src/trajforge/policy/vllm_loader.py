"""``vllm:`` policies by name: a vLLM server started here for a model, or one already running.

- ``vllm:<folder>``: a transformers model folder (or a checkpoints folder's ``latest``);
- ``vllm:embedded``, ``vllm:tiny``, ``vllm:pocket``: trajforge's named models, saved once as a
  folder vLLM reads (the scratch models per ``seed``);
- ``vllm:http://host:port``: a running vLLM server; its model's tokenizer is read from the
  folder it serves (``/v1/models``' ``root``) unless ``tokenizer=`` is given.

Importing this module loads torch and transformers; ``naming`` imports it only when a ``vllm:``
policy is asked for.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import httpx
import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from trajforge.errors import ConfigError
from trajforge.policy.models.checkpoint import resolve_checkpoint
from trajforge.policy.models.embedded import embedded_model_dir
from trajforge.policy.models.smollm2 import cache_root, load_tokenizer
from trajforge.policy.models.tiny import SCRATCH_SIZES, scratch_model_and_tokenizer
from trajforge.policy.saved import save_tokenizer
from trajforge.policy.vllm import VLLMPolicy
from trajforge.policy.vllm_server import VLLM_PREFIX, vllm_server
from trajforge.server_process import ServerProcess

SERVER_OPTIONS = ("max_lora_rank", "kv_cache_gib", "extra_args", "startup_timeout_s", "python")
"""``vllm_server`` options a caller may pass through ``load_policy``."""
DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def vllm_policy(spec: str, kw: dict[str, Any]) -> VLLMPolicy:
    """The ``vllm:`` policy ``spec`` names; pops the options it uses from ``kw`` (``dtype``,
    ``max_batch_size``, ``seed``, ``name``, ``tokenizer`` and ``SERVER_OPTIONS``)."""
    target = spec.removeprefix(VLLM_PREFIX)
    if not target:
        raise ConfigError(
            f"policy {spec!r}: write vllm:<model folder>, vllm:embedded, vllm:tiny or "
            "vllm:http://host:port"
        )
    if target.startswith(("http://", "https://")):
        return connect_vllm(target, spec, kw)
    return start_vllm(target, spec, kw)


def start_vllm(target: str, spec: str, kw: dict[str, Any]) -> VLLMPolicy:
    """Start a vLLM server for ``target`` (waits until it answers) and the policy over it."""
    dtype = DTYPES.get(kw.pop("dtype", None) or torch.float32)
    if dtype is None:
        raise ConfigError(f"policy {spec!r}: vLLM serves float32, bfloat16 or float16 weights")
    folder, tokenizer = served_folder(target, kw.pop("seed", 0))
    options = {k: kw.pop(k) for k in SERVER_OPTIONS if k in kw}
    max_num_seqs = kw.pop("max_batch_size", None)

    def server_for(folder: Path) -> ServerProcess:
        return vllm_server(folder, dtype=dtype, max_num_seqs=max_num_seqs, **options)

    server = server_for(folder)
    url = server.start()
    try:
        info = served_model(url)
    except ConfigError:
        server.stop()
        raise
    return VLLMPolicy(
        tokenizer,
        url,
        str(info["id"]),
        server=server,
        server_for=server_for,
        name=kw.pop("name", spec),
        dtype=dtype,
        max_context_tokens=info.get("max_model_len"),
    )


def connect_vllm(url: str, spec: str, kw: dict[str, Any]) -> VLLMPolicy:
    """The policy over the vLLM server running at ``url``."""
    info = served_model(url.rstrip("/").removesuffix("/v1"))
    tokenizer: PreTrainedTokenizerBase | None = kw.pop("tokenizer", None)
    root = Path(str(info.get("root") or info["id"]))
    if tokenizer is None:
        if not (root / "tokenizer_config.json").is_file():
            raise ConfigError(
                f"policy {spec!r}: the server's model {root} is no folder here with a "
                "tokenizer; pass tokenizer= (the ids are rendered here)"
            )
        tokenizer = AutoTokenizer.from_pretrained(str(root))
    return VLLMPolicy(
        tokenizer,
        url.rstrip("/").removesuffix("/v1"),
        str(info["id"]),
        name=kw.pop("name", spec),
        max_context_tokens=info.get("max_model_len"),
    )


def served_model(url: str) -> dict[str, Any]:
    """The first model ``url``'s ``/v1/models`` lists (``id``, ``root``, ``max_model_len``)."""
    try:
        reply = httpx.get(f"{url}/v1/models", timeout=30.0)
        reply.raise_for_status()
        models = reply.json()["data"]
        first: dict[str, Any] = models[0]
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise ConfigError(f"vllm: {url}/v1/models lists no model: {exc}") from None
    return first


def served_folder(target: str, seed: int) -> tuple[Path, PreTrainedTokenizerBase]:
    """The model folder vLLM loads for ``target`` and the tokenizer that renders for it."""
    if target == "embedded":
        return embedded_model_dir(), load_tokenizer()
    if target in SCRATCH_SIZES:
        return saved_scratch(target, seed), load_tokenizer()
    folder = resolve_checkpoint(Path(target).expanduser())
    if not (folder / "tokenizer_config.json").is_file():
        raise ConfigError(f"vllm:{target}: {folder} holds no tokenizer (tokenizer_config.json)")
    return folder, AutoTokenizer.from_pretrained(str(folder))


def saved_scratch(name: str, seed: int) -> Path:
    """Scratch model ``name`` at ``seed``'s weights, saved once as a model folder in the cache
    (written to a temporary folder and renamed into place)."""
    final = cache_root() / "vllm" / f"{name}-seed{seed}"
    if (final / "config.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        model, tokenizer = scratch_model_and_tokenizer(name, seed)
        model.save_pretrained(tmp, safe_serialization=True)
        save_tokenizer(tokenizer, tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / "config.json").is_file():  # another process put its copy there
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
