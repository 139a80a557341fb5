"""Text embeddings from a local model, for retrieval (the experience memory's ``--memory-embed``).

A text's embedding is the model's last hidden state averaged over the text's tokens (padding
left out), L2-normalised, in float32, so that a dot product of two is their cosine similarity.

Why the mean: it is the pooling that sentence-transformers encoders are mostly trained with
(Reimers & Gurevych 2019 found it beat the ``[CLS]`` state), so an encoder folder gives here the
embeddings it was trained to give; and for a causal LM, whose last token's state is tuned to
predict the next token rather than to summarise the text, the mean of every position is the
steadier summary (Muennighoff 2022, "SGPT", pools decoders by a mean too).

A causal LM (``embedded``, ``tiny``, a chat model's folder) was never trained to place similar
texts close together, so its embeddings rank worse than a trained encoder's, and ``tiny``'s random
weights rank only by surface overlap; for retrieval that matters, give the folder of an encoder
(a BERT or sentence-transformers model saved with ``save_pretrained``, e.g. all-MiniLM-L6-v2),
which is loaded through ``transformers.AutoModel``. Named models, training checkpoints and
causal-LM folders load through the policies' own loader (``models.loaders.causal_lm``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer

from trajforge.policy.models.checkpoint import is_checkpoint
from trajforge.policy.models.loaders import causal_lm
from trajforge.policy.naming import EMBEDDER_NAMES, check_embedder_name

BATCH_SIZE = 16
MAX_LENGTH = 512
"""Tokens kept of a text (the rest is cut): the positions a BERT encoder has."""


def is_encoder_folder(spec: str) -> bool:
    """Whether ``spec`` is a model folder whose architecture is no causal LM (an encoder)."""
    if spec in EMBEDDER_NAMES:
        return False
    folder = Path(spec).expanduser()
    config = folder / "config.json"
    if is_checkpoint(folder) or not config.is_file():
        return False
    architectures = json.loads(config.read_text()).get("architectures") or []
    return not any(str(a).endswith("ForCausalLM") for a in architectures)


class TextEmbedder:
    """Embeds texts with ``model``'s base (no LM head): ``embedder(texts)`` is an ``(n, d)``
    float32 array of unit rows; a text with no tokens gets the zero vector.

    Args:
        model: A transformers model; its ``base_model`` gives the hidden states.
        tokenizer: Its tokenizer (only read: the padding is done here).
        name: What the retrieval record calls the model (``embedding:<name>``).
        batch_size: Texts per forward pass.
        max_length: Tokens kept of each text.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        *,
        name: str,
        batch_size: int = BATCH_SIZE,
        max_length: int = MAX_LENGTH,
    ) -> None:
        self.model = model.eval()
        self.encoder: nn.Module = getattr(model, "base_model", model)
        self.tokenizer = tokenizer
        self.name = name
        self.batch_size, self.max_length = batch_size, max_length
        # Any id will do: padding is right of the text and masked out of attention and the mean.
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else 0
        config: Any = model.config
        self.dim = int(config.hidden_size)
        self.device = next(model.parameters()).device

    @classmethod
    def load(cls, spec: str, **kw: Any) -> TextEmbedder:
        """The embedder over model ``spec``: ``embedded``, ``tiny``, ``pocket``, a training
        checkpoint or a model folder (an encoder's through ``AutoModel``), in float32."""
        check_embedder_name(spec)
        model: nn.Module
        if is_encoder_folder(spec):
            folder = str(Path(spec).expanduser())
            model = AutoModel.from_pretrained(folder, dtype=torch.float32)
            tokenizer = AutoTokenizer.from_pretrained(folder)
        else:
            model, tokenizer = causal_lm(spec, dtype=torch.float32)
        return cls(model, tokenizer, name=spec, **kw)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """The embeddings of ``texts``, one unit row each, in their order."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        ids: list[list[int]] = self.tokenizer(
            list(texts), add_special_tokens=True, truncation=True, max_length=self.max_length
        )["input_ids"]
        # Texts of like length share a batch, so little of each pass is padding.
        order = sorted((i for i, row in enumerate(ids) if row), key=lambda i: len(ids[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            out[chunk] = self._pooled([ids[i] for i in chunk]).numpy()
        return out

    @torch.inference_mode()
    def _pooled(self, rows: list[list[int]]) -> torch.Tensor:
        width = max(len(row) for row in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):
            ids[r, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[r, : len(row)] = 1
        # Padding on the right: a causal model's real tokens never see it and keep their
        # positions, so a text embeds the same alone or beside a longer one.
        hidden = self.encoder(
            input_ids=ids.to(self.device), attention_mask=mask.to(self.device)
        ).last_hidden_state.float()
        weights = mask.to(hidden.device, hidden.dtype).unsqueeze(-1)
        mean = (hidden * weights).sum(dim=1) / weights.sum(dim=1)
        return torch.nn.functional.normalize(mean, dim=-1).cpu()
