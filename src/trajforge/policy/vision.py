"""``VisionPolicy``: a Hugging Face image-text-to-text model (processor plus model) as a local,
token-exact policy.

The conversation is rendered by a ``VisionRenderer``: the prompt ids hold each image's
placeholder tokens expanded as the processor expands them, and the trajectory records those
ids; the pixels are recomputed from the images' bytes whenever the model runs (here, and in
training's forward, ``trajforge.train.batch``). Sampling and the reported logprobs are
``HFPolicy``'s (the same sampler, ``log_softmax(logits / T)`` over the whole vocabulary), so a
trainer's recomputation compares like with like.

Sequences are decoded one at a time with the model's own key-value cache (vision-language
models' forwards differ too much for the batched decoder, ``engine.hf_engine``); weight
changes (``set_weights``, adapters) wait for the sequence in flight, as in ``HFPolicy``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from trajforge.policy.base import Completion, FinishReason, SamplingParams, TokenSink
from trajforge.policy.engine.sampling import (
    UniformStream,
    sample_tokens,
    step_uniforms,
    truncations,
)
from trajforge.policy.hf import HFPolicy
from trajforge.policy.renderer import ToolProtocol
from trajforge.policy.token_policy import TokenPolicy, TurnRequest, stream_whole
from trajforge.policy.vision_render import VisionRenderer, forward_inputs, pixel_inputs
from trajforge.schema import ImagePart, Message


class VisionPolicy(HFPolicy):
    """A vision-language model behind the token-level policy contract.

    Args:
        model: an image-text-to-text model (``AutoModelForImageTextToText`` or the model's
            class), possibly shared with a trainer.
        processor: its processor (tokenizer, image processor, chat template).
        device, eos_token_ids, max_context_tokens, tool_protocol, parser, name: see
            ``HFPolicy``.
    """

    name = "vlm"

    def __init__(
        self,
        model: Any,
        processor: Any,
        *,
        device: str | torch.device | None = None,
        eos_token_ids: Sequence[int] | None = None,
        max_context_tokens: int | None = None,
        tool_protocol: ToolProtocol | str = ToolProtocol.AUTO,
        parser: str = "text",
        name: str | None = None,
    ) -> None:
        renderer = VisionRenderer(processor, tool_protocol=tool_protocol, parser=parser)
        super().__init__(
            model,
            renderer.tokenizer,
            max_batch_size=1,
            device=device,
            eos_token_ids=eos_token_ids,
            max_context_tokens=max_context_tokens,
            tool_protocol=tool_protocol,
            parser=parser,
            name=name,
            prefix_cache_mb=0,
            lean_decode=False,
            share_prefixes=False,
        )
        self.processor = processor
        self.renderer = renderer
        self._decoding = threading.Lock()

    # ``TokenPolicy``'s, not ``HFPolicy``'s: generating needs the session's messages (their
    # images).
    complete = TokenPolicy.complete

    async def complete_whole(self, turn: TurnRequest) -> Completion:
        """The session's next completion, shown the images of its messages (``generate``,
        given token ids alone, samples without them)."""
        messages = turn.session.messages
        return await self._generate(None, turn.prompt_ids, turn.sampling, messages, None)

    async def _sample(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        max_new_tokens: int,
        messages: Sequence[Message] | None,
        on_token: TokenSink | None,
    ) -> Completion:
        """Up to ``max_new_tokens`` sampled for ``prompt_ids``, whose image placeholders stand
        for the images of ``messages`` in order (none when ``messages`` is not given)."""
        images = [image for m in messages or () for image in m.images]
        with self._worker.in_flight():
            version = self.weights_version
            completion = await asyncio.to_thread(
                self._decode, prompt_ids, images, sampling, max_new_tokens
            )
        stream_whole(completion, on_token)
        completion.weights_version = version
        return completion

    @contextlib.contextmanager
    def _one_in_eval_mode(self) -> Iterator[None]:
        """One sequence at a time, the model in eval mode (its mode restored after)."""
        with self._decoding, torch.inference_mode():
            training = bool(self.model.training)
            self.model.eval()
            try:
                yield
            finally:
                if training:
                    self.model.train()

    def _decode(
        self,
        prompt_ids: list[int],
        images: list[ImagePart],
        sampling: SamplingParams,
        max_new_tokens: int,
    ) -> Completion:
        with self._one_in_eval_mode():
            device = next(self.model.parameters()).device
            ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
            pixels = pixel_inputs(self.processor, images) if images else {}
            vision = forward_inputs(self.model, ids, pixels) if images else {}
            out = self.model(input_ids=ids, use_cache=True, **vision)
            stream = UniformStream.seeded(sampling.seed, device)
            temperature = torch.tensor([sampling.temperature], device=device)
            cuts = truncations([sampling], device)
            tokens: list[int] = []
            logprobs: list[float] = []
            finish = FinishReason.LENGTH
            while len(tokens) < max_new_tokens:
                uniforms = step_uniforms([stream], [sampling.temperature], device)
                logits = out.logits[:, -1].float()
                token, logprob = sample_tokens(logits, temperature, cuts, uniforms)
                tokens.append(int(token))
                logprobs.append(float(logprob))
                if tokens[-1] in self.eos_ids or self._hit_stop(tokens, sampling.stop):
                    finish = FinishReason.STOP
                    break
                out = self.model(input_ids=token.view(1, 1), cache=out.cache, use_cache=True)
        text_ids = tokens[:-1] if tokens and tokens[-1] in self.eos_ids else tokens
        return Completion(
            token_ids=tokens,
            logprobs=logprobs,
            text=str(self.tokenizer.decode(text_ids, skip_special_tokens=False)),
            finish_reason=finish,
        )

    def _hit_stop(self, tokens: list[int], stops: Sequence[str]) -> bool:
        return bool(stops) and any(
            stop in self.tokenizer.decode(tokens, skip_special_tokens=False) for stop in stops
        )
