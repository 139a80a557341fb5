"""``HFPolicy``: a transformers causal LM with dynamic, continuous batching.

Every ``generate`` call from any number of concurrent episodes goes into one queue. A worker
thread owns the model (``hf_worker.BatchWorker``): between two decode steps it admits whatever
is waiting (up to ``max_batch_size`` live sequences), prefills those prompts together and
appends them to the running batch; finished sequences leave the batch at once. The event loop
never runs the model, so it keeps serving tool calls while the model computes.

Logprobs: each sampled token's ``log_softmax(logits / temperature)`` over the full vocabulary
(temperature 1 when greedy, before top-p truncation): the log-probability an RL trainer
recomputes from the same logits, so old/new ratios are exact at ratio 1 when nothing changed.

Seeds: each request gets its own ``torch.Generator`` (from ``SamplingParams.seed``), and a
sequence's samples depend only on its own logits and generator, never on its batch neighbours.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from peft import PeftModel

from trajforge.errors import ConfigError
from trajforge.policy.base import ChatSession, Completion, FinishReason, SamplingParams, TokenSink
from trajforge.policy.engine.adapter_bank import AdapterBank
from trajforge.policy.engine.decode_weights import forget_decode_weights
from trajforge.policy.engine.generation_request import EngineStats
from trajforge.policy.engine.hf_engine import DecodeEngine
from trajforge.policy.engine.lora import LoraAdapter
from trajforge.policy.engine.lora import load_adapter as load_lora
from trajforge.policy.engine.prefix_cache import PrefixCache
from trajforge.policy.hf_worker import BatchWorker, GenerationError
from trajforge.policy.renderer import ToolProtocol
from trajforge.policy.session import RenderedSession
from trajforge.policy.token_policy import TokenPolicy, TurnRequest
from trajforge.precision import precision_of
from trajforge.ram import return_freed_memory
from trajforge.schema import Message

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class HFPolicy(TokenPolicy):
    """A local transformers model behind the token-level policy contract.

    Args:
        model: a causal LM (``AutoModelForCausalLM``), possibly shared with a trainer: the
            worker switches it to eval mode while it generates and restores the mode after.
        tokenizer: its tokenizer (with a chat template).
        max_batch_size: most sequences decoded together.
        device: move the model there first (default: where it already is).
        eos_token_ids: ids that end a sequence (default: the tokenizer's and the generation
            config's end-of-sequence ids).
        max_context_tokens: prompt plus completion limit (default: the model's
            ``max_position_embeddings``).
        tool_protocol, parser, name: see ``TokenPolicy``.
        prefix_cache_mb: memory for finished sequences' keys and values, reused when a prompt
            continues one (an episode's next turn); 0 turns reuse off. A trainer that changes
            a shared model in place must call ``set_weights(model)`` after, which clears it.
        lean_decode: run Llama-architecture models through ``llama_decode`` (the same
            equations with less overhead; prefills of newly admitted prompts share the running
            decode step's forward); False keeps the transformers forward.
        share_prefixes: prefill once what prompts admitted together begin with (a system
            prompt, a group's task), each prompt then only the rest; False prefills every
            prompt whole (``engine.shared_prefix``).
        adapter_cache_mb: memory for the LoRA adapters served by name (``add_adapter``),
            least recently used dropped first beyond it (``engine.adapter_bank``).
    """

    name = "hf"

    def __init__(
        self,
        model: Any,
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_batch_size: int = 16,
        device: str | torch.device | None = None,
        eos_token_ids: Sequence[int] | None = None,
        max_context_tokens: int | None = None,
        tool_protocol: ToolProtocol | str = ToolProtocol.AUTO,
        parser: str = "text",
        name: str | None = None,
        prefix_cache_mb: float = 1024,
        lean_decode: bool = True,
        share_prefixes: bool = True,
        adapter_cache_mb: float = 512,
    ) -> None:
        super().__init__(tokenizer, tool_protocol=tool_protocol, parser=parser, name=name)
        if max_batch_size < 1:
            raise ConfigError(f"max_batch_size: must be at least 1, got {max_batch_size}")
        if device is not None:
            model = model.to(device)
        return_freed_memory()
        self.model = model
        self.max_batch_size = max_batch_size
        self.eos_ids = frozenset(
            eos_token_ids if eos_token_ids is not None else _eos_ids(model, tokenizer)
        )
        config = model.config.get_text_config(decoder=True)
        self.max_context_tokens: int = max_context_tokens or int(config.max_position_embeddings)
        self.vocab_size = int(model.get_input_embeddings().num_embeddings)
        self.prefix_cache = (
            PrefixCache(int(prefix_cache_mb * 2**20)) if prefix_cache_mb > 0 else None
        )
        self._engine = DecodeEngine(
            model,
            tokenizer,
            self.eos_ids,
            self.prefix_cache,
            lean_decode=lean_decode,
            share_prefixes=share_prefixes,
            adapters=AdapterBank(int(adapter_cache_mb * 2**20), self._load_lora),
        )
        self._worker = BatchWorker(self._engine, max_batch_size, lambda: self.weights_version)
        self._adapter_serial = 0
        self.weights_version = 0
        """Counts weight changes (``set_weights``, adapters); each completion records it."""

    @property
    def precision(self) -> str:
        return precision_of(next(self.model.parameters()).dtype)

    @property
    def stats(self) -> EngineStats:
        """How much batching happened so far (prefills, decode steps, rows per step)."""
        return replace(self._engine.stats)

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        *,
        on_token: TokenSink | None = None,
    ) -> Completion:
        """Sample a continuation of ``prompt_ids`` (checked first: ``room_after``);
        ``on_token`` gets each id as it is sampled."""
        return await self._generate(None, prompt_ids, sampling, None, on_token)

    async def generate_with_adapter(
        self,
        adapter: str | None,
        prompt_ids: list[int],
        sampling: SamplingParams,
        *,
        on_token: TokenSink | None = None,
    ) -> Completion:
        """``generate`` with the LoRA adapter named ``adapter`` (``add_adapter``; None: the
        base weights), in the same batch as every other adapter's rows."""
        return await self._generate(adapter, prompt_ids, sampling, None, on_token)

    async def _generate(
        self,
        adapter: str | None,
        prompt_ids: list[int],
        sampling: SamplingParams,
        messages: Sequence[Message] | None,
        on_token: TokenSink | None,
    ) -> Completion:
        room = self.room_after(prompt_ids, sampling)
        if adapter is not None:
            self.adapters.check(adapter)
        if sampling.max_new_tokens == 0:
            return Completion(token_ids=[], logprobs=[], text="", finish_reason=FinishReason.LENGTH)
        max_new_tokens = min(sampling.max_new_tokens, room)
        if adapter is None:
            return await self._sample(prompt_ids, sampling, max_new_tokens, messages, on_token)
        return await self._worker.sample(prompt_ids, sampling, max_new_tokens, on_token, adapter)

    async def _sample(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        max_new_tokens: int,
        messages: Sequence[Message] | None,
        on_token: TokenSink | None,
    ) -> Completion:
        """Up to ``max_new_tokens`` sampled in the shared batch, each id handed to ``on_token``
        as the decode step that sampled it ends."""
        return await self._worker.sample(prompt_ids, sampling, max_new_tokens, on_token, None)

    def room_after(self, prompt_ids: list[int], sampling: SamplingParams) -> int:
        """Tokens the context has left after ``prompt_ids``, once the prompt and ``sampling``
        are checked (raises ``GenerationError`` or ``ConfigError`` naming what is wrong)."""
        _check_sampling(sampling)
        if not prompt_ids:
            raise GenerationError("generate: the prompt has no token ids")
        if min(prompt_ids) < 0 or max(prompt_ids) >= self.vocab_size:
            # Checked here: inside the batch one bad prompt would fail its neighbours too.
            bad = next(t for t in prompt_ids if not 0 <= t < self.vocab_size)
            raise GenerationError(
                f"generate: token id {bad} is outside the model's vocabulary (0..{self.vocab_size - 1})"
            )
        room = self.max_context_tokens - len(prompt_ids)
        if room <= 0:
            raise GenerationError(
                f"generate: the prompt has {len(prompt_ids)} tokens, the model's context holds "
                f"{self.max_context_tokens}"
            )
        return room

    async def complete(self, turn: TurnRequest) -> Completion:
        return await self.generate(turn.prompt_ids, turn.sampling, on_token=turn.on_token)

    # --- weights --------------------------------------------------------------------------

    def set_weights(self, weights: Any, *, version: int | None = None) -> None:
        """Load a module's or a state dict's weights. Waits for in-flight sequences to finish
        and holds new ones back meanwhile, so no sequence mixes two sets of weights. Removes
        a loaded adapter first. Passing the policy's own model only synchronises
        (and forgets reused keys and values, which the old weights computed). ``version``:
        what completions sampled from them record (a trainer's update count; default: one
        more than the last)."""
        with self._worker.paused():
            self.weights_version = self.weights_version + 1 if version is None else version
            if weights is self.model or weights is self._base_model():
                self._forget_states()
                return
            state = weights.state_dict() if isinstance(weights, torch.nn.Module) else weights
            if not isinstance(state, Mapping):
                raise ConfigError(
                    f"set_weights: expected a module or a state dict, got {type(weights).__name__}"
                )
            self._drop_adapter()
            _load_exact(self.model, state)
            self._forget_states()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """``set_weights`` for a state dict."""
        self.set_weights(state_dict)

    def load_adapter(self, path: str | Path) -> None:
        """Apply the PEFT LoRA adapter saved in ``path`` (replacing any adapter loaded before),
        between generations like ``set_weights``."""
        folder = Path(path)
        if not (folder / "adapter_config.json").is_file():
            raise ConfigError(f"load_adapter: {folder} has no adapter_config.json")
        with self._worker.paused():
            self.weights_version += 1
            self._adapter_serial += 1
            name = f"trajforge_{self._adapter_serial}"
            if isinstance(self.model, PeftModel):
                previous = self.model.active_adapter
                self.model.load_adapter(str(folder), adapter_name=name)
                self.model.set_adapter(name)
                self.model.delete_adapter(previous)
            else:
                self.model = PeftModel.from_pretrained(self.model, str(folder), adapter_name=name)
            self.model.eval()
            self._engine.model = self.model
            self._forget_states()

    def unload_adapter(self) -> None:
        """Go back to the base weights, between generations like ``set_weights``."""
        with self._worker.paused():
            if isinstance(self.model, PeftModel):
                self.weights_version += 1
                self._drop_adapter()

    @property
    def adapters(self) -> AdapterBank:
        """The LoRA adapters served by name, each row decoding with its own."""
        assert self._engine.adapters is not None
        return self._engine.adapters

    @property
    def serves_adapters(self) -> bool:
        """Whether ``add_adapter`` works: the model runs on the lean forward."""
        return self._engine.serves_adapters

    def add_adapter(self, name: str, path: str | Path) -> None:
        """Serve the PEFT LoRA adapter saved in ``path`` as ``name`` (replacing what ``name``
        was), beside the base weights and the other adapters: requests naming it decode with
        it, in the same batch as everyone else's. Requests under way keep what they started
        with."""
        if not self.serves_adapters:
            raise ConfigError(
                f"add_adapter: {type(self.model).__name__} serves no adapters by name (they "
                "need a Llama-architecture model on the lean forward)"
            )
        self.adapters.register(name, Path(path))
        self.weights_version += 1

    def adapter_names(self) -> list[str]:
        """The adapters served by name, in the order they were added."""
        return self.adapters.names()

    def remove_adapter(self, name: str) -> None:
        """Stop serving ``name``; requests under way finish with it."""
        self.adapters.remove(name)
        self.weights_version += 1

    def _load_lora(self, name: str, folder: Path, key: int | None) -> LoraAdapter:
        return load_lora(name, folder, self._base_model(), self._engine.device, key)

    def _base_model(self) -> Any:
        get_base = getattr(self.model, "get_base_model", None)
        return get_base() if callable(get_base) else self.model

    def _drop_adapter(self) -> None:
        if isinstance(self.model, PeftModel):
            self.model = self.model.unload()
            self._engine.model = self.model
            self._forget_states()

    def end_session(self, session: ChatSession) -> None:
        if self.prefix_cache is None or not isinstance(session, RenderedSession):
            return
        self._worker.end(session.token_ids())

    def _forget_states(self) -> None:
        """Reused keys and values, and the decoder's fused weights, belong to the old weights
        (which a fused optimizer step may have changed unseen)."""
        forget_decode_weights(self.model)
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    async def close(self) -> None:
        """Stop the worker thread; requests still waiting fail with ``GenerationError``. A
        later ``generate`` starts a new worker."""
        await self._worker.close()


def _check_sampling(sampling: SamplingParams) -> None:
    if sampling.temperature < 0:
        raise ConfigError(f"sampling.temperature: must be >= 0, got {sampling.temperature}")
    if not 0 < sampling.top_p <= 1:
        raise ConfigError(f"sampling.top_p: must be in (0, 1], got {sampling.top_p}")
    if sampling.top_k < 0:
        raise ConfigError(f"sampling.top_k: must be >= 0 (0: no cut), got {sampling.top_k}")
    if sampling.max_new_tokens < 0:
        raise ConfigError(f"sampling.max_new_tokens: must be >= 0, got {sampling.max_new_tokens}")


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for source in (tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, list | tuple):
            ids.update(int(i) for i in source)
    return ids


def _load_exact(model: Any, state: Mapping[str, Any]) -> None:
    """``load_state_dict`` that names mismatched keys instead of loading part of them."""
    expected = set(model.state_dict())
    given = set(state)
    missing, unexpected = sorted(expected - given), sorted(given - expected)
    if missing or unexpected:
        raise ConfigError(
            "set_weights: the state dict does not fit the model: "
            f"missing {missing[:5]}{' ...' if len(missing) > 5 else ''}, "
            f"unexpected {unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}"
        )
    model.load_state_dict(state, strict=True)
