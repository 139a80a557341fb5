"""The batched decode loop behind ``HFPolicy``: continuous batching over a causal LM.

Sequences join the running batch between decode steps (their prompts are prefilled together,
left-padded, and their caches appended to the batch's) and leave it as soon as they finish, so
the batch only ever computes live rows. With the lean Llama forward, newcomers are prefilled in
the same pass as the live rows' decode step, so admitting them costs no forward of its own. With
a ``PrefixCache``, a prompt that continues a finished sequence (the next turn of an episode)
prefills only its new tokens. Every row has its own sampling parameters, uniform stream, stop
strings and token budget, and may name its own LoRA adapter from an ``AdapterBank``: rows under
different adapters decode in the same forward (``lora``). The engine is synchronous and single-threaded; ``HFPolicy`` runs it in
a worker thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from trajforge.errors import ConfigError
from trajforge.policy.base import FinishReason
from trajforge.policy.engine.adapter_bank import AdapterBank
from trajforge.policy.engine.decode_mask import DecodeMask, pad_left
from trajforge.policy.engine.generation_request import EngineStats, GenerationRequest, hit_stop
from trajforge.policy.engine.llama_decode import (
    ForwardGroup,
    attention_dtype,
    lean_forward,
    supports_lean_decode,
)
from trajforge.policy.engine.prefill import Prefill, build_prefill, length_groups
from trajforge.policy.engine.prefix_cache import PrefixCache, PrefixEntry
from trajforge.policy.engine.sampling import sample_tokens, step_uniforms
from trajforge.policy.engine.shared_prefix import share_prefixes

if TYPE_CHECKING:
    from trajforge.policy.engine.kv_cache import RowCache


class DecodeEngine:
    """Holds the live batch: rows, their KV cache, attention mask and next inputs."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        eos_ids: Iterable[int],
        prefix_cache: PrefixCache | None = None,
        lean_decode: bool = True,
        share_prefixes: bool = True,
        adapters: AdapterBank | None = None,
    ) -> None:
        self.lean_decode = lean_decode
        self.adapters = adapters
        self.share_prefixes = share_prefixes
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = frozenset(eos_ids)
        self.prefix_cache = prefix_cache
        self.stats = EngineStats()
        self.rows: list[GenerationRequest] = []
        self._cache: RowCache | None = None
        self._mask: DecodeMask | None = None
        self._positions: torch.Tensor | None = None
        self._next_tokens: torch.Tensor | None = None
        self._temperatures: torch.Tensor | None = None
        self._cuts: torch.Tensor | None = None

    @property
    def model(self) -> Any:
        return self._model

    @model.setter
    def model(self, model: Any) -> None:
        # Decided once per model, not per step: the check reads a dozen module attributes.
        self._model = model
        self._lean = self.lean_decode and supports_lean_decode(model)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _attention_dtype(self) -> torch.dtype:
        weight = self.model.get_input_embeddings().weight
        dtype: torch.dtype = weight.dtype
        return attention_dtype(dtype, weight.device) if self._lean else dtype

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def serves_adapters(self) -> bool:
        """Whether rows can decode with adapters by name: only the lean forward applies them."""
        return self.adapters is not None and self._lean

    def reserve(self, request: GenerationRequest) -> bool:
        """Hold the adapter ``request`` names until it leaves the batch (``AdapterBank.hold``;
        False: it waits for room)."""
        if request.adapter_name is None:
            return True
        if self.adapters is None or not self._lean:
            raise ConfigError(
                f"adapter {request.adapter_name!r}: this model serves no adapters by name "
                "(they need a Llama-architecture model on the lean forward)"
            )
        return self.adapters.hold(request)

    def release(self, request: GenerationRequest) -> None:
        """Let go of ``request``'s adapter (once; later calls do nothing)."""
        if self.adapters is not None:
            self.adapters.let_go(request)

    def advance(self, admitted: list[GenerationRequest]) -> list[GenerationRequest]:
        """Admit ``admitted`` and/or decode one token for every live row. Returns the requests
        that are finished after it. With the lean forward, a decode step and the prefill of
        the prompts that arrived meanwhile are one forward pass."""
        if admitted and self.rows and self._lean:
            return self._step_and_prefill(admitted)
        if admitted:
            return self.add(admitted)
        if self.rows:
            return self.step()
        return []

    def add(self, requests: list[GenerationRequest]) -> list[GenerationRequest]:
        """Prefill ``requests`` (in groups of similar length), sample their first tokens and
        join them to the batch. Returns the requests that are finished after this step."""
        finished: list[GenerationRequest] = []
        for group in self._prefill_groups(requests):
            if self._lean:
                (logits,) = lean_forward(self.model, [group.forward])
            else:
                logits = self._forward(
                    group.forward.ids, group.mask, group.forward.positions, group.forward.cache
                )
            finished += self._admit(group, logits)
        return finished

    def _step_and_prefill(self, requests: list[GenerationRequest]) -> list[GenerationRequest]:
        """One lean forward: a decode step for the live rows and the prefill of ``requests``."""
        groups = self._prefill_groups(requests)
        logits = lean_forward(self.model, [self._decode_group(), *(g.forward for g in groups)])
        live = len(self.rows)
        temperatures = torch.cat(
            [self._require(self._temperatures), *(g.temperatures for g in groups)]
        )
        cuts = torch.cat([self._require(self._cuts), *(g.cuts for g in groups)])
        requests = self.rows + [r for g in groups for r in g.requests]
        uniforms = self._uniforms(requests, logits[0].device)
        tokens, logprobs = sample_tokens(torch.cat(logits), temperatures, cuts, uniforms)
        self._advance_decoded(tokens[:live])
        self.stats.fused_prefills += len(groups)
        offset = live
        for group in groups:
            count = len(group.requests)
            self._join_group(group, tokens[offset : offset + count])
            offset += count
        finished = self._record(0, tokens, logprobs)
        self._compact()
        return finished

    def _prefill_groups(self, requests: list[GenerationRequest]) -> list[Prefill]:
        """Prefill inputs for ``requests``, in groups of similar length."""
        if self.prefix_cache is not None:
            for request in requests:
                request.prefix = self.prefix_cache.lookup(request.prompt_ids, request.adapter_key)
        layers = self.model.config.get_text_config(decoder=True).num_hidden_layers
        if self.share_prefixes:
            self._share_prefixes(requests, layers)
        return [build_prefill(group, layers, self.device) for group in length_groups(requests)]

    def _share_prefixes(self, requests: list[GenerationRequest], layers: int) -> None:
        """Prefill once what prompts admitted together begin with (``shared_prefix``), over
        what earlier batches shared; each then prefills only the rest. Prompts that continue a
        cached sequence keep that."""
        computed = share_prefixes(
            requests, layers, self.device, self._prefill_only, self.prefix_cache
        )
        self.stats.prefill_tokens += computed
        self.stats.shared_prefill_tokens += computed

    def _prefill_only(self, group: ForwardGroup, mask: torch.Tensor) -> None:
        """Run ``group`` through the model for its cache alone."""
        if self._lean:
            lean_forward(self.model, [group])
        else:
            self._forward(group.ids, mask, group.positions, group.cache)

    def _admit(self, group: Prefill, logits: torch.Tensor) -> list[GenerationRequest]:
        """Sample the first tokens of a prefilled ``group`` and join it to the batch."""
        tokens, logprobs = sample_tokens(
            logits, group.temperatures, group.cuts, self._uniforms(group.requests, logits.device)
        )
        start = len(self.rows)
        self._join_group(group, tokens)
        finished = self._record(start, tokens, logprobs)
        self._compact()
        return finished

    def _join_group(self, group: Prefill, tokens: torch.Tensor) -> None:
        width = group.forward.ids.shape[-1]
        self.stats.prefills += 1
        self.stats.prefill_rows += len(group.requests)
        self.stats.prefill_tokens += int(group.mask[:, -width:].sum())
        self.stats.reused_tokens += group.reused_tokens
        self._join(
            group.requests,
            group.forward.cache,
            group.mask,
            group.mask.sum(-1),
            tokens,
            group.temperatures,
            group.cuts,
        )

    def step(self) -> list[GenerationRequest]:
        """One decode step for every live row. Returns the requests finished by it."""
        group = self._decode_group()
        if self._lean:
            (logits,) = lean_forward(self.model, [group])
        else:
            logits = self._forward(group.ids, group.mask, group.positions, group.cache)
        tokens, logprobs = sample_tokens(
            logits,
            self._require(self._temperatures),
            self._require(self._cuts),
            self._uniforms(self.rows, logits.device),
        )
        self._advance_decoded(tokens)
        finished = self._record(0, tokens, logprobs)
        self._compact()
        return finished

    @staticmethod
    def _uniforms(requests: list[GenerationRequest], device: torch.device) -> torch.Tensor:
        return step_uniforms(
            [r.uniforms for r in requests], [r.sampling.temperature for r in requests], device
        )

    def _decode_group(self) -> ForwardGroup:
        """The live rows' next inputs, their attention mask grown by the new column."""
        assert self._cache is not None and self._mask is not None
        self._mask.append_column()
        # A ready [B, 1, 1, L] mask: one decoded token attends to every unpadded column, so
        # transformers' causal-mask construction is skipped. The lean forward takes the
        # additive form, which attention would otherwise rebuild from a bool mask in every layer.
        mask = self._mask.attention_bias() if self._lean else self._mask.mask[:, None, None, :]
        adapters = [r.adapter for r in self.rows]
        return ForwardGroup(
            self._require(self._next_tokens)[:, None],
            mask,
            self._require(self._positions)[:, None],
            self._cache,
            adapters if any(a is not None for a in adapters) else (),
        )

    def _advance_decoded(self, tokens: torch.Tensor) -> None:
        self._positions = self._require(self._positions) + 1
        self._next_tokens = tokens
        self.stats.decode_steps += 1
        self.stats.decode_rows += len(tokens)

    @staticmethod
    def _require(tensor: torch.Tensor | None) -> torch.Tensor:
        assert tensor is not None, "the engine has no live rows"
        return tensor

    def drop_cancelled(self) -> None:
        """Remove rows whose caller stopped waiting (an episode timeout, a cancelled task)."""
        if any(r.is_cancelled() for r in self.rows):
            self._compact()

    def fail_all(self) -> list[GenerationRequest]:
        """Forget every row (after an exception); returns them so the caller can report it."""
        rows, self.rows = self.rows, []
        for request in rows:
            self.release(request)
        self._cache = None
        self._mask = self._positions = self._next_tokens = None
        self._temperatures = self._cuts = None
        return rows

    def _forward(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: RowCache
    ) -> torch.Tensor:
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            cache=cache.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1, :].float()

    def _join(
        self,
        requests: list[GenerationRequest],
        cache: RowCache,
        mask: torch.Tensor,
        positions: torch.Tensor,
        tokens: torch.Tensor,
        temperatures: torch.Tensor,
        cuts: torch.Tensor,
    ) -> None:
        self.rows.extend(requests)
        self.stats.max_rows = max(self.stats.max_rows, len(self.rows))
        if self._cache is None:
            self._cache, self._positions = cache, positions
            self._mask = DecodeMask(mask, self._attention_dtype())
            self._next_tokens, self._temperatures, self._cuts = tokens, temperatures, cuts
            return
        assert self._mask is not None and self._positions is not None
        assert self._next_tokens is not None
        assert self._temperatures is not None and self._cuts is not None
        width = max(self._mask.width, mask.shape[-1])
        self._cache.append_rows(cache)
        self._mask = DecodeMask(
            torch.cat([pad_left(self._mask.mask, width), pad_left(mask.bool(), width)]),
            self._mask.dtype,
        )
        self._positions = torch.cat([self._positions, positions])
        self._next_tokens = torch.cat([self._next_tokens, tokens])
        self._temperatures = torch.cat([self._temperatures, temperatures])
        self._cuts = torch.cat([self._cuts, cuts])

    def _record(
        self, start: int, tokens: torch.Tensor, logprobs: torch.Tensor
    ) -> list[GenerationRequest]:
        finished: list[GenerationRequest] = []
        rows = self.rows[start:]
        for request, token, logprob in zip(rows, tokens.tolist(), logprobs.tolist(), strict=True):
            request.token_ids.append(token)
            request.logprobs.append(logprob)
            self.stats.generated_tokens += 1
            if request.on_token is not None:
                request.on_token(token)
            if token in self.eos_ids or hit_stop(request, self.tokenizer):
                request.finish_reason = FinishReason.STOP
            elif len(request.token_ids) >= request.max_new_tokens:
                request.finish_reason = FinishReason.LENGTH
            if request.finish_reason is not None:
                finished.append(request)
        return finished

    def _compact(self) -> None:
        """Drop finished and cancelled rows, and padding columns no live row needs."""
        keep = [
            i for i, r in enumerate(self.rows) if r.finish_reason is None and not r.is_cancelled()
        ]
        if len(keep) == len(self.rows):
            return
        self._remember_finished()
        if not keep:
            self.fail_all()
            return
        assert self._cache is not None and self._mask is not None
        assert self._positions is not None and self._next_tokens is not None
        assert self._temperatures is not None and self._cuts is not None
        index = torch.tensor(keep, dtype=torch.long, device=self._positions.device)
        mask = self._mask.mask[index]
        drop_left = int(mask.any(dim=0).long().argmax())
        self._cache.select_rows(index, drop_left)
        self._mask = DecodeMask(mask[:, drop_left:], self._mask.dtype)
        self._positions = self._positions[index]
        self._next_tokens = self._next_tokens[index]
        self._temperatures = self._temperatures[index]
        self._cuts = self._cuts[index]
        for i in set(range(len(self.rows))) - set(keep):
            self.release(self.rows[i])
        self.rows = [self.rows[i] for i in keep]

    def _remember_finished(self) -> None:
        """Put finished rows' keys and values in the prefix cache: the prompt and every
        generated token but the last (which was sampled, never fed back)."""
        if self.prefix_cache is None or self._cache is None or self._mask is None:
            return
        for i, request in enumerate(self.rows):
            if request.finish_reason is None or request.is_cancelled():
                continue
            tokens = request.prompt_ids + request.token_ids[:-1]
            columns = self._mask.mask[i]
            if int(columns.sum()) != len(tokens):
                continue
            keys, values = self._cache.row_states(i, columns)
            self.prefix_cache.store(PrefixEntry(tokens, keys, values, request.adapter_key))
