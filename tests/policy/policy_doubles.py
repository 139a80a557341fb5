"""Test policies: preset completions, and a one-sequence ``model.generate`` backend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trajforge.policy.base import Completion, FinishReason, SamplingParams
from trajforge.policy.token_policy import TokenPolicy


class PresetPolicy(TokenPolicy):
    """Returns the given completions in order and records every prompt it was given."""

    def __init__(self, tokenizer: Any, completions: Sequence[Completion], **kw: Any) -> None:
        super().__init__(tokenizer, **kw)
        self.completions = list(completions)
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        self.prompts.append(list(prompt_ids))
        return self.completions[len(self.prompts) - 1]


def sampled(ids: list[int], finish: FinishReason = FinishReason.STOP) -> Completion:
    """A completion as a backend returns it: the ids with (made-up) logprobs."""
    return Completion(
        token_ids=list(ids), logprobs=[-0.5] * len(ids), text="", finish_reason=finish
    )


class LocalGeneratePolicy(TokenPolicy):
    """``model.generate`` on one sequence at a time, with the sampled tokens' logprobs."""

    def __init__(self, model: Any, tokenizer: Any, **kw: Any) -> None:
        super().__init__(tokenizer, **kw)
        self.model = model
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        import torch

        self.prompts.append(list(prompt_ids))
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        do_sample = sampling.temperature > 0
        with torch.no_grad():
            out = self.model.generate(
                torch.tensor([prompt_ids]),
                attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
                max_new_tokens=sampling.max_new_tokens,
                do_sample=do_sample,
                temperature=sampling.temperature if do_sample else None,
                top_p=sampling.top_p if do_sample else None,
                top_k=None,
                eos_token_id=self.tokenizer.eos_token_id,
                pad_token_id=self.tokenizer.pad_token_id,
                output_scores=True,
                return_dict_in_generate=True,
            )
        ids = out.sequences[0, len(prompt_ids) :].tolist()
        logprobs = [
            torch.log_softmax(score[0].float(), dim=-1)[token].item()
            for score, token in zip(out.scores, ids, strict=True)
        ]
        eos = self.tokenizer.eos_token_id
        finish = FinishReason.STOP if ids and ids[-1] == eos else FinishReason.LENGTH
        return Completion(
            token_ids=ids,
            logprobs=logprobs,
            text=self.tokenizer.decode(ids),
            finish_reason=finish,
        )
