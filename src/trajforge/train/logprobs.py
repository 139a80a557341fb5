"""Per-token logprobs of a causal LM on a ``TokenBatch``, computed only where the loss looks.

The output head (vocabulary x hidden, the largest matmul of a small model) and the softmax run
only at the positions that predict a loss token, so prompts and tool results cost a backbone
pass and nothing more. Rows that start alike run their common prefix once
(``trajforge.train.shared_prefix``). The selected tokens' logprobs are gathered from a full
log-softmax: on a CPU its fused kernel, forward and backward, beat logit minus logsumexp (several
passes) over 1024 x 49152 logits (docs/benchmarks.md, RL step). ``TokenLogprobModel`` wraps the
model as one ``nn.Module`` so that ``accelerate`` (DDP/FSDP) sees a normal forward call.

A batch with images (``vision``: a vision-language model's pixel tensors) runs the whole
multimodal backbone (vision tower, projector, language model) once per row, no prefix shared:
the images' features replace their placeholder tokens before the first layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from trajforge.policy import forward_inputs
from trajforge.train.shared_prefix import backbone_hidden


@dataclass
class TokenLogprobs:
    """``logprobs[b, t]`` = log p(token t | tokens < t) where ``mask`` is set, 0 elsewhere."""

    logprobs: torch.Tensor
    entropy: torch.Tensor | None
    mask: torch.Tensor


def unwrapped_lm(model: nn.Module) -> nn.Module:
    """A HF model without its PEFT wrapper."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def causal_lm_parts(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    """Backbone (ids -> hidden states) and output head of a HF causal LM, PEFT-wrapped or not."""
    lm = unwrapped_lm(model)
    get_decoder = getattr(lm, "get_decoder", None)
    get_head = getattr(lm, "get_output_embeddings", None)
    if not callable(get_decoder) or not callable(get_head):
        raise TypeError(f"{type(model).__name__} is not a Hugging Face causal LM")
    backbone, head = get_decoder(), get_head()
    if backbone is None or head is None:
        raise TypeError(f"{type(model).__name__} has no decoder or output head")
    return backbone, head


def logprobs_from_logits(
    logits: torch.Tensor, input_ids: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Full-logits reference path: ``logits [B, T, V]`` at position t predict token t + 1."""
    lp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    tok = lp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    out = torch.zeros(input_ids.shape, dtype=tok.dtype, device=tok.device)
    out[:, 1:] = tok
    return out * mask.to(out.dtype)


class TokenLogprobModel(nn.Module):
    """Wraps a causal LM; ``forward`` returns ``[B, T]`` logprobs of the tokens in ``mask``.

    ``reference_path`` runs every row through the whole model (no shared prefix): what the fast
    path is checked against and benchmarked beside."""

    def __init__(self, model: nn.Module, *, reference_path: bool = False) -> None:
        super().__init__()
        self.model = model
        self.reference_path = reference_path

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        mask: torch.Tensor,
        with_entropy: bool = False,
        temperature: float = 1.0,
        vision: dict[str, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``temperature`` divides the logits, as the sampler did when it drew the tokens (an RL
        update then differentiates the tempered policy its rollouts came from). ``vision``: the
        batch's pixel tensors, for a vision-language model."""
        if vision is not None:
            hidden, head = _multimodal_hidden(self.model, input_ids, attention_mask, vision)
        else:
            backbone, head = causal_lm_parts(self.model)
            hidden = backbone_hidden(
                backbone, input_ids, attention_mask, share_prefix=not self.reference_path
            )
        # Position t - 1 predicts token t: select the hidden states before each loss token.
        select = mask[:, 1:].bool()
        h = hidden[:, :-1][select]
        targets = input_ids[:, 1:][select]
        logits = head(h).float()
        if temperature != 1.0:
            logits = logits / temperature
        log_probs = torch.log_softmax(logits, dim=-1)
        tok = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        out = torch.zeros(input_ids.shape, dtype=tok.dtype, device=tok.device)
        out[:, 1:] = out[:, 1:].masked_scatter(select, tok)
        entropy: torch.Tensor | None = None
        if with_entropy:
            ent = -(log_probs.exp() * log_probs).sum(-1).detach()
            entropy = torch.zeros(input_ids.shape, dtype=ent.dtype, device=ent.device)
            entropy[:, 1:] = entropy[:, 1:].masked_scatter(select, ent)
        return out, entropy


def _multimodal_hidden(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    vision: dict[str, torch.Tensor],
) -> tuple[torch.Tensor, nn.Module]:
    """Last hidden states of a vision-language model (its ``base_model``: vision tower,
    projector and language model) and its output head."""
    lm: Any = unwrapped_lm(model)
    inputs = forward_inputs(lm, input_ids, vision)
    out = lm.base_model(input_ids=input_ids, attention_mask=attention_mask, **inputs)
    return out.last_hidden_state, lm.get_output_embeddings()


def token_logprobs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mask: torch.Tensor,
    *,
    with_entropy: bool = False,
) -> TokenLogprobs:
    """Logprobs of the masked tokens under ``model`` (a ``TokenLogprobModel`` or a causal LM)."""
    wrapped = model if _is_logprob_model(model) else TokenLogprobModel(model)
    lp, ent = wrapped(input_ids, attention_mask, mask, with_entropy)
    return TokenLogprobs(lp, ent, mask.bool())


def _is_logprob_model(model: nn.Module) -> bool:
    inner = getattr(model, "module", model)
    return isinstance(inner, TokenLogprobModel)
