"""A sampling client's weights, sampled by trajforge's ``HFPolicy`` and recorded in the store.

Every sampled sequence becomes a token-exact trajectory: a user message holding the prompt's
ids as sent and an assistant message holding the sampled ids and their logprobs. All the
trajectories of one sampling client form one run (``tinker-<sampler id>``) whose metadata records
the weights it samples (their path and version); the sequences of one ``sample`` call share a
group.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import torch

from trajforge.policy import FinishReason, HFPolicy, SamplingParams
from trajforge.schema import Message, Outcome, Role, Task, Trajectory, Usage
from trajforge.store import TrajectoryStore
from trajforge.tinker.errors import UserError
from trajforge.tinker.wire import Sequence


class Sampler:
    """One sampling client: a frozen copy of some weights and where its samples go."""

    def __init__(
        self,
        sampler_id: str,
        base: str,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        model_path: str | None,
        weights_version: int,
        store: TrajectoryStore | None,
    ) -> None:
        self.sampler_id = sampler_id
        self.base = base
        self.model_path = model_path
        self.weights_version = weights_version
        self.policy = HFPolicy(model, tokenizer, name=base)
        self.tokenizer = tokenizer
        self.store = store
        self.run_id = "tinker-" + sampler_id.replace(":", "-")
        if store is not None:
            store.set_run(
                self.run_id,
                {
                    "kind": "tinker-sampler",
                    "model": base,
                    "model_path": model_path,
                    "weights_version": weights_version,
                },
            )

    async def sample(
        self, prompt: list[int], n: int, params: dict[str, Any], group: str
    ) -> list[Sequence]:
        """``n`` continuations of ``prompt``; seeds ``seed``, ``seed + 1``, ... where given."""
        sampling = _sampling(params)
        stop_ids = _stop_ids(params.get("stop"))
        seeds = [None if sampling.seed is None else sampling.seed + i for i in range(n)]
        started = time.time()
        completions = await asyncio.gather(
            *(
                self.policy.generate(prompt, _with_seed(sampling, seed, stop_ids, self.tokenizer))
                for seed in seeds
            )
        )
        sequences = []
        for completion in completions:
            ids, logprobs = list(completion.token_ids), list(completion.logprobs or [])
            cut = next((i for i, t in enumerate(ids) if t in stop_ids), None)
            if cut is not None:
                ids, logprobs = ids[: cut + 1], logprobs[: cut + 1]
            stopped = cut is not None or completion.finish_reason is FinishReason.STOP
            sequences.append(Sequence(tokens=ids, logprobs=logprobs, stopped=stopped))
        if self.store is not None:
            for index, seq in enumerate(sequences):
                self.store.put(self._trajectory(prompt, seq, group, index, started))
        return sequences

    def prompt_logprobs(self, prompt: list[int]) -> list[float]:
        """Logprob of each prompt token after those before it; NaN for the first."""
        ids = torch.tensor([prompt])
        with torch.no_grad():
            logits = self.policy.model(input_ids=ids).logits.float()[0]
        lp = torch.log_softmax(logits[:-1], dim=-1).gather(-1, ids[0, 1:].unsqueeze(-1))
        return [float("nan"), *lp.squeeze(-1).tolist()]

    def _trajectory(
        self, prompt: list[int], seq: Sequence, group: str, index: int, started: float
    ) -> Trajectory:
        prompt_text = self.tokenizer.decode(prompt)
        return Trajectory(
            id=uuid.uuid4().hex,
            # One task per sample call: its sequences are that task's samples, one group.
            task=Task(id=f"tinker-{group}", prompt=prompt_text),
            run_id=self.run_id,
            group_id=group,
            sample_index=index,
            model=self.base,
            messages=[
                Message(role=Role.USER, content=prompt_text, token_ids=list(prompt)),
                Message(
                    role=Role.ASSISTANT,
                    content=self.tokenizer.decode(seq.tokens),
                    token_ids=seq.tokens,
                    logprobs=seq.logprobs,
                ),
            ],
            outcome=Outcome(),
            usage=Usage(
                prompt_tokens=len(prompt),
                completion_tokens=len(seq.tokens),
                turns=1,
                wall_time_s=time.time() - started,
            ),
            metadata={
                "rendering": "raw",
                "tinker": {
                    "sampler": self.sampler_id,
                    "model_path": self.model_path,
                    "weights_version": self.weights_version,
                    "stop_reason": "stop" if seq.stopped else "length",
                },
            },
        )


def _sampling(params: dict[str, Any]) -> SamplingParams:
    max_tokens = params.get("max_tokens")
    if max_tokens is None or max_tokens < 0:
        raise UserError(f"sampling_params.max_tokens: must be given and >= 0, got {max_tokens}")
    top_k = params.get("top_k", -1)
    if not isinstance(top_k, int) or top_k < -1:
        raise UserError(f"sampling_params.top_k: must be -1 (no cut) or a count >= 0, got {top_k}")
    stop = params.get("stop")
    texts = [stop] if isinstance(stop, str) else [s for s in stop or [] if isinstance(s, str)]
    return SamplingParams(
        temperature=float(params.get("temperature", 1.0)),
        top_p=float(params.get("top_p", 1.0)),
        top_k=max(top_k, 0),
        max_new_tokens=int(max_tokens),
        stop=texts,
        seed=params.get("seed"),
    )


def _stop_ids(stop: Any) -> set[int]:
    if isinstance(stop, list) and stop and all(isinstance(s, int) for s in stop):
        return set(stop)
    return set()


def _with_seed(
    sampling: SamplingParams, seed: int | None, stop_ids: set[int], tokenizer: Any
) -> SamplingParams:
    # A stop token is watched for as its text: the engine ends the row as soon as the text
    # appears, and ``sample`` cuts the ids right after the stop token itself.
    texts = [tokenizer.decode([t]) for t in sorted(stop_ids)]
    return SamplingParams(
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        max_new_tokens=sampling.max_new_tokens,
        stop=[*sampling.stop, *texts],
        seed=seed,
    )
