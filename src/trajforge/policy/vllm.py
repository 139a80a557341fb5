"""``VLLMPolicy``: a vLLM server as a token policy, started here or already running.

Token ids in and out: the conversation is rendered here with the model's tokenizer (the one
``ChatRenderer`` every token policy uses), the prompt goes to vLLM's ``/v1/completions`` as a
list of ids, and the sampled ids and their logprobs come back (``return_token_ids``,
``return_tokens_as_token_ids``), so a trajectory holds exactly what the model saw and sampled.

Weights follow a trainer through LoRA adapters (vLLM's ``/v1/load_lora_adapter``): the policy
is a ``TakesAdapters`` like ``HFPolicy``, so the gateway's adapter endpoints and a trainer drive
it alike, and every completion carries the ``weights_version`` that sampled it. Full weights
follow by a reload (``reload``): vLLM's weight-update endpoints move tensors over NCCL or CUDA
IPC, which a CPU build has not, so a managed server is started again on the new folder. A managed
server that exits fails the calls under way with its stderr's tail (``VLLMServerError``, an
infrastructure fault) and is started again, its adapter reloaded, by the next call.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from trajforge.errors import ConfigError
from trajforge.policy.base import Completion, SamplingParams
from trajforge.policy.openai_compat import OpenAIError, OpenAIPolicy
from trajforge.policy.token_policy import TokenPolicy
from trajforge.policy.vllm_server import VLLMServerError
from trajforge.server_process import ServerProcess

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

REQUEST_TIMEOUT_S = 600.0
ADMIN_TIMEOUT_S = 120.0
EXIT_GRACE_S = 10.0
PRECISIONS = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


@dataclasses.dataclass(frozen=True)
class Served:
    """What new calls sample from: the model name vLLM knows them by and their version."""

    model: str
    version: int
    adapter: Path | None = None


class VLLMPolicy(TokenPolicy):
    """A vLLM server's model, token ids in and out.

    Args:
        tokenizer: The served model's tokenizer (what renders the prompts).
        base_url: The server's root (``http://127.0.0.1:8000``); a managed server's own URL
            replaces it.
        model: The name the server serves the base weights under.
        server: The server this policy started and stops (``None``: one already running).
        server_for: Makes a server like the managed one for another model folder (what
            ``reload`` starts); ``None``: the policy cannot reload.
        name: The policy's name (recorded as the trajectory's model).
        dtype: The served weights' dtype (``float32``, ``bfloat16``) where known.
        max_context_tokens: The server's ``max_model_len``.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        base_url: str,
        model: str,
        *,
        server: ServerProcess | None = None,
        server_for: Callable[[Path], ServerProcess] | None = None,
        name: str,
        dtype: str | None = None,
        max_context_tokens: int | None = None,
    ) -> None:
        super().__init__(tokenizer, name=name)
        self.server = server
        self.server_for = server_for
        self.base_model = model
        self.dtype = dtype
        self.max_context_tokens = max_context_tokens
        # A managed server's failures are its own to report (no retries against a dead one).
        self.client = OpenAIPolicy(
            base_url, model, timeout_s=REQUEST_TIMEOUT_S, max_retries=0 if server else 3
        )
        self.served = Served(model, 0)
        self._replaced: Served | None = None
        self._restart_lock: asyncio.Lock | None = None
        # The server the client's URL and the served adapter are for, once they are (while one
        # starts, calls wait for it rather than go to the URL of the one before).
        self._up: ServerProcess | None = server

    @property
    def weights_version(self) -> int:
        """How many times the served weights changed (an adapter loaded or unloaded)."""
        return self.served.version

    @property
    def precision(self) -> str | None:
        return PRECISIONS.get(self.dtype or "")

    # --- token level ----------------------------------------------------------------------

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        await self._ensure_running()
        served = self.served
        try:
            completion = await self.client.generate(prompt_ids, sampling, model=served.model)
        except OpenAIError as exc:
            raise await self._failure(exc) from exc
        return dataclasses.replace(completion, weights_version=served.version)

    async def _failure(self, exc: OpenAIError) -> Exception:
        """A dead managed server's exit as the error (with its stderr), else ``exc``. What is
        left of the dead server's process group goes now, not at the restart."""
        server = self.server
        if server is None:
            return exc
        # The server dropping the connection comes a moment before its process is seen to end.
        lost = isinstance(exc.__cause__, httpx.TransportError)
        if not await asyncio.to_thread(server.exited_within, EXIT_GRACE_S if lost else 0.0):
            return exc
        error = VLLMServerError(
            f"{server.name} exited with status {server.exit_code()} while sampling "
            f"(the next call starts it again){server.stderr_tail()}"
        )
        await asyncio.to_thread(server.stop)
        return error

    async def _ensure_running(self) -> None:
        """Start a managed server that exited (or was reloaded), with the adapter it served."""
        server = self.server
        if server is None or (self._up is server and server.running):
            return
        if self._restart_lock is None:
            self._restart_lock = asyncio.Lock()
        async with self._restart_lock:
            if self._up is server and server.running:
                return
            self._up = None
            url = await asyncio.to_thread(server.start)
            self.client.base_url = f"{url}/v1"
            self._replaced = None
            adapter = self.served.adapter
            if adapter is not None:
                await asyncio.to_thread(self._admin, "load_lora_adapter", self.served, adapter)
            self._up = server

    # --- weights --------------------------------------------------------------------------

    def load_adapter(self, path: str | Path, version: int | None = None) -> None:
        """Serve the PEFT LoRA adapter saved in ``path``: calls made from now on sample with it,
        calls under way finish on the weights they started with. ``version``: what the calls
        sampling with it record (a trainer's update count; the next version where ``None``)."""
        folder = Path(path).resolve()
        if not (folder / "adapter_config.json").is_file():
            raise ConfigError(f"load_adapter: {folder} has no adapter_config.json")
        if version is None:
            version = self.served.version + 1
        new = Served(f"trajforge-v{version}", version, folder)
        self._admin("load_lora_adapter", new, folder)
        self._switch(new)

    def reload(self, folder: Path, version: int) -> None:
        """Serve the full weights in model folder ``folder`` as ``version``: the managed server
        stops now and one starts on ``folder`` at the next call (so a run's last update costs
        no start). Calls must not be under way: they would end with the server."""
        if self.server is None or self.server_for is None:
            raise ConfigError(
                f"{self.name}: only a vLLM server trajforge started can be reloaded with new "
                "weights; follow a running one with LoRA adapters (load_adapter)"
            )
        self.server.stop()
        self.server = self.server_for(folder)
        self.served, self._replaced = Served(str(folder), version), None

    def unload_adapter(self) -> None:
        """Back to the base weights, from the next call on."""
        if self.served.adapter is not None:
            self._switch(Served(self.base_model, self.served.version + 1))

    def _switch(self, new: Served) -> None:
        # The adapter replaced stays loaded until the next switch, so that a call which read
        # its name just before this one still finds it; the one before that goes now.
        stale, self._replaced, self.served = self._replaced, self.served, new
        if stale is not None and stale.adapter is not None:
            self._admin("unload_lora_adapter", stale)

    def _admin(self, endpoint: str, served: Served, folder: Path | None = None) -> None:
        body: dict[str, Any] = {"lora_name": served.model}
        if folder is not None:
            body["lora_path"] = str(folder)
        url = f"{self.client.base_url.removesuffix('/v1')}/v1/{endpoint}"
        try:
            reply = httpx.post(url, json=body, timeout=ADMIN_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise VLLMServerError(f"{url}: {exc!r}") from exc
        if reply.status_code != 200:
            raise VLLMServerError(f"{url}: HTTP {reply.status_code}: {reply.text[:300]}")

    async def close(self) -> None:
        await self.client.close()
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)
