"""llama.cpp as ``bench/engines.py`` runs it: the rows as sequences of one batch, greedy.

``llama-cpp-python``'s ``Llama`` decodes one sequence at a time, so the rows go through its
low-level API as llama.cpp's own ``batched`` example does: every row is a sequence id of one
``llama_batch``, prefilled together (in chunks of ``n_batch`` tokens), then one token a row per
``llama_decode``, the argmax of each row's logits taken here. The weights are a GGUF file of the
same model in the bench's dtype, made by llama.cpp's ``convert_hf_to_gguf.py`` from the folder
trajforge serves (docs/benchmarks.md, Engines).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

Generate = Callable[[list[list[int]], int], int]


class LlamaCppRows:
    """A llama.cpp model and context holding up to ``rows`` sequences of ``context`` tokens in
    all."""

    def __init__(self, gguf: Path, rows: int, context: int) -> None:
        import llama_cpp as lc  # not installed by make setup: imported where it is asked for

        self.lc = lc
        # Its load and context reports would bury the bench's own lines.
        self._quiet = lc.llama_log_callback(lambda level, text, data: None)
        lc.llama_log_set(self._quiet, ctypes.c_void_p(0))
        lc.llama_backend_init()
        model_params = lc.llama_model_default_params()
        self.model = lc.llama_model_load_from_file(str(gguf).encode(), model_params)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {gguf}")
        params = lc.llama_context_default_params()
        params.n_ctx = context
        params.n_batch = params.n_ubatch = min(context, 2048)
        params.n_seq_max = rows
        params.n_threads = params.n_threads_batch = os.cpu_count() or 1
        params.kv_unified = True  # the rows share one cache of ``context`` tokens
        self.ctx = lc.llama_init_from_model(self.model, params)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not make a context of {context} tokens")
        self.n_batch = int(params.n_batch)
        self.n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(self.model))
        self.batch = lc.llama_batch_init(self.n_batch, 0, rows)

    def _decode(self, items: list[tuple[int, int, int, bool]]) -> dict[int, int]:
        """One ``llama_decode`` of ``(token, position, sequence, wants_logits)`` items; the
        argmax token of each sequence that wanted logits."""
        batch = self.batch
        for i, (token, pos, seq, logits) in enumerate(items):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = logits
        batch.n_tokens = len(items)
        code = self.lc.llama_decode(self.ctx, batch)
        if code != 0:
            raise RuntimeError(f"llama_decode returned {code}")
        chosen = {}
        for i, (_, _, seq, logits) in enumerate(items):
            if logits:
                row = self.lc.llama_get_logits_ith(self.ctx, i)
                chosen[seq] = int(np.ctypeslib.as_array(row, shape=(self.n_vocab,)).argmax())
        return chosen

    def generate(self, prompts: list[list[int]], n: int) -> int:
        """``n`` greedy tokens after each prompt, all rows at once; the tokens sampled."""
        self.lc.llama_memory_clear(self.lc.llama_get_memory(self.ctx), True)
        items = [
            (token, pos, seq, pos == len(prompt) - 1)
            for seq, prompt in enumerate(prompts)
            for pos, token in enumerate(prompt)
        ]
        last: dict[int, int] = {}
        for start in range(0, len(items), self.n_batch):
            last |= self._decode(items[start : start + self.n_batch])
        sampled = len(prompts)
        for step in range(n - 1):
            step_items = [
                (last[seq], len(prompt) + step, seq, True) for seq, prompt in enumerate(prompts)
            ]
            last = self._decode(step_items)
            sampled += len(prompts)
        return sampled

    def close(self) -> None:
        lc: Any = self.lc
        lc.llama_batch_free(self.batch)
        lc.llama_free(self.ctx)
        lc.llama_model_free(self.model)
