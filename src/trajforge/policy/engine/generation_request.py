"""What the decode engine works on: one request per sequence, its result, and batching counters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trajforge.policy.base import Completion, FinishReason, SamplingParams

if TYPE_CHECKING:
    from trajforge.policy.engine.lora import LoraAdapter
    from trajforge.policy.engine.prefix_cache import PrefixEntry
    from trajforge.policy.engine.sampling import UniformStream


@dataclass(eq=False)
class GenerationRequest:
    """One sequence to generate. ``deliver`` receives the result once it is finished."""

    prompt_ids: list[int]
    sampling: SamplingParams
    max_new_tokens: int
    uniforms: UniformStream
    deliver: Callable[[Completion | BaseException], None]
    is_cancelled: Callable[[], bool] = lambda: False
    on_token: Callable[[int], None] | None = None
    """Called on the engine's thread with each id as it is sampled."""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    prefix: PrefixEntry | None = None
    weights_version: int = 0
    """The policy's weights when the request was admitted (they cannot change until it ends)."""
    adapter_name: str | None = None
    """The LoRA adapter to decode with, by name (None: the base weights)."""
    adapter: LoraAdapter | None = None
    """That adapter's weights, held from admission until the request leaves the batch."""

    @property
    def adapter_key(self) -> int:
        """Which weights compute the request's keys and values: 0 for the base weights."""
        return 0 if self.adapter is None else self.adapter.key

    @property
    def suffix(self) -> list[int]:
        """The prompt tokens the prefill computes: those after the reused prefix."""
        return self.prompt_ids[len(self.prefix.tokens) :] if self.prefix else self.prompt_ids


@dataclass
class EngineStats:
    """Counters that show how much batching happened."""

    prefills: int = 0
    """Prefill groups, including those run inside a decode step's forward (``fused_prefills``)."""
    fused_prefills: int = 0
    decode_steps: int = 0
    prefill_rows: int = 0
    decode_rows: int = 0
    max_rows: int = 0
    generated_tokens: int = 0
    prefill_tokens: int = 0
    shared_prefill_tokens: int = 0
    """Of ``prefill_tokens``, those prefilled once for several prompts that begin with them."""
    reused_tokens: int = 0


def completion_of(
    request: GenerationRequest, tokenizer: Any, eos_ids: frozenset[int]
) -> Completion:
    """The finished request as a ``Completion``; the text leaves out a final end-of-sequence
    token (the ids keep it: the model sampled it and it is part of the context)."""
    ids = request.token_ids
    text_ids = ids[:-1] if ids and ids[-1] in eos_ids else ids
    return Completion(
        token_ids=list(ids),
        logprobs=list(request.logprobs),
        text=tokenizer.decode(text_ids, skip_special_tokens=False),
        finish_reason=request.finish_reason or FinishReason.LENGTH,
        weights_version=request.weights_version,
    )


STOP_WINDOW_SLACK = 8
"""Tokens decoded beyond the longest stop string's length when looking for it."""


def hit_stop(request: GenerationRequest, tokenizer: Any) -> bool:
    """Whether the text of ``request``'s last sampled tokens holds one of its stop strings."""
    stops = request.sampling.stop
    if not stops:
        return False
    window = max(len(s) for s in stops) + STOP_WINDOW_SLACK
    tail = tokenizer.decode(request.token_ids[-window:], skip_special_tokens=False)
    return any(stop in tail for stop in stops)
