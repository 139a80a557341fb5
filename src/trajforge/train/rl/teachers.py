"""Teachers of on-policy distillation: whatever returns ``log p(token t | tokens < t)`` of
given token ids. A local model (the weights being trained, or a frozen model loaded beside
them) runs a forward pass; an OpenAI-compatible server is asked for the prompt's log-
probabilities (``/completions`` with ``echo`` and ``logprobs``, as vLLM answers it).

The teacher reads the student's very token ids, so the two must tokenize alike: a teacher whose
vocabulary differs is refused in one line unless a ``token_map`` from the student's ids to the
teacher's is given.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
import torch
from torch import nn

from trajforge.errors import ConfigError, DataError, InfraError
from trajforge.policy import OPENAI_PREFIX, parse_openai_spec
from trajforge.train.logprobs import TokenLogprobModel
from trajforge.train.model import TrainParts, load_base_model
from trajforge.train.rl.distill_settings import SELF_TEACHER, DistillSettings
from trajforge.train.settings import ModelSettings


class TokenScorer(Protocol):
    """Scores token ids: ``score(rows, masks)[r][t]`` is ``log p(rows[r][t] | rows[r][:t])``
    where ``masks[r][t]`` is set, 0 elsewhere."""

    def score(self, rows: Sequence[list[int]], masks: Sequence[list[bool]]) -> list[list[float]]:
        """The log-probabilities of each row's masked tokens."""
        ...


@dataclass(eq=False, repr=False)
class ModelScorer:
    """A local causal LM's log-probabilities, ``max_batch_size`` rows a forward, no gradient;
    its logits divided by ``temperature`` (the student's sampling temperature)."""

    module: nn.Module
    _: KW_ONLY
    device: torch.device
    pad_token_id: int
    temperature: float
    max_batch_size: int
    autocast: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext

    @torch.no_grad()
    def score(self, rows: Sequence[list[int]], masks: Sequence[list[bool]]) -> list[list[float]]:
        out: list[list[float]] = []
        for chunk in _chunks(len(rows), self.max_batch_size):
            width = max(len(rows[i]) for i in chunk)
            ids = torch.full((len(chunk), width), self.pad_token_id, dtype=torch.long)
            attention = torch.zeros((len(chunk), width), dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.bool)
            for j, i in enumerate(chunk):
                n = len(rows[i])
                ids[j, :n] = torch.tensor(rows[i], dtype=torch.long)
                attention[j, :n] = 1
                mask[j, :n] = torch.tensor(masks[i], dtype=torch.bool)
            with self.autocast():
                lp, _ = self.module(
                    ids.to(self.device),
                    attention.to(self.device),
                    mask.to(self.device),
                    False,
                    self.temperature,
                )
            lp = lp.float().cpu()
            out.extend(lp[j, : len(rows[i])].tolist() for j, i in enumerate(chunk))
        return out


class EndpointTeacher:
    """An OpenAI-compatible server's log-probabilities of given tokens: one ``/completions``
    request per ``max_batch_size`` rows, the rows as token-id prompts, ``echo`` on, one token
    generated (servers refuse zero). ``decode``: the student's ids to text, to check on the
    first answer that the server reads the ids as the student's tokenizer does (null: a
    ``token_map`` is given, the ids are the teacher's own)."""

    def __init__(
        self,
        spec: str,
        *,
        max_batch_size: int,
        timeout_s: float,
        decode: Callable[[list[int]], str] | None,
        client: httpx.Client | None = None,
    ) -> None:
        self.spec = spec
        self.base_url, self.model = parse_openai_spec(spec)
        self.max_batch_size = max_batch_size
        self.decode = decode
        self.client = client or httpx.Client(timeout=timeout_s)

    def score(self, rows: Sequence[list[int]], masks: Sequence[list[bool]]) -> list[list[float]]:
        out: list[list[float]] = []
        for chunk in _chunks(len(rows), self.max_batch_size):
            choices = self._complete([rows[i] for i in chunk])
            for choice, i in zip(choices, chunk, strict=True):
                out.append(self._row_logprobs(choice, rows[i], masks[i]))
        return out

    def _complete(self, prompts: list[list[int]]) -> list[dict[str, Any]]:
        body = {
            "model": self.model,
            "prompt": prompts,
            "max_tokens": 1,
            "temperature": 0.0,
            "echo": True,
            "logprobs": 0,
        }
        url = f"{self.base_url.rstrip('/')}/completions"
        try:
            response = self.client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise InfraError(f"distill.teacher {self.spec}: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            text = response.text.strip().replace("\n", " ")[:200]
            raise InfraError(
                f"distill.teacher {self.spec}: /completions answered {response.status_code}: {text}"
            )
        choices = sorted(response.json().get("choices", []), key=lambda c: int(c.get("index", 0)))
        if len(choices) != len(prompts):
            raise InfraError(
                f"distill.teacher {self.spec}: {len(choices)} choices for {len(prompts)} prompts"
            )
        return choices

    def _row_logprobs(
        self, choice: dict[str, Any], row: list[int], mask: list[bool]
    ) -> list[float]:
        info = choice.get("logprobs") or {}
        values = info.get("token_logprobs") or []
        if len(values) < len(row):
            raise InfraError(
                f"distill.teacher {self.spec}: the server returned {len(values)} prompt "
                f"log-probabilities for {len(row)} tokens; it must honour echo with logprobs"
            )
        if self.decode is not None:
            echoed = "".join((info.get("tokens") or [])[: len(row)])
            if echoed != self.decode(row):
                raise ConfigError(
                    f"distill.teacher {self.spec}: the server reads the student's token ids as "
                    "other text (another tokenizer); give distill.token_map or a teacher with "
                    "the student's tokenizer"
                )
            self.decode = None  # one row shows it: the vocabulary is the server's, not the row's
        return [
            float(v) if on and v is not None else 0.0
            for v, on in zip(values[: len(mask)], mask, strict=True)
        ]


def build_teacher(
    settings: DistillSettings, parts: TrainParts, temperature: float, *, mapped: bool
) -> TokenScorer:
    """The teacher ``settings`` names, on ``parts``' device; a local teacher whose tokenizer
    differs from the student's is refused unless ``mapped`` (a ``token_map`` is given)."""
    spec = settings.teacher
    if spec.startswith(OPENAI_PREFIX):
        return EndpointTeacher(
            spec,
            max_batch_size=settings.max_batch_size,
            timeout_s=settings.timeout_s,
            decode=None if mapped else lambda ids: str(parts.tokenizer.decode(ids)),
        )
    if spec == SELF_TEACHER:
        module = parts.logprob_model
    else:
        model, tokenizer = load_base_model(ModelSettings(spec=spec))
        if not mapped:
            check_same_tokenizer(spec, tokenizer, parts.tokenizer)
        model.eval()
        module = TokenLogprobModel(model.requires_grad_(False)).to(parts.device)
    return ModelScorer(
        module,
        device=parts.device,
        pad_token_id=parts.pad_token_id,
        temperature=temperature,
        max_batch_size=settings.max_batch_size,
        autocast=parts.accelerator.autocast,
    )


def check_same_tokenizer(spec: str, teacher: Any, student: Any) -> None:
    """Refuse, in one line, a teacher tokenizer whose vocabulary is not the student's."""
    theirs, ours = teacher.get_vocab(), student.get_vocab()
    if theirs == ours:
        return
    differ = sum(1 for token, i in ours.items() if theirs.get(token) != i)
    raise ConfigError(
        f"distill.teacher: {spec!r} tokenizes unlike the student ({len(theirs)} vs {len(ours)} "
        f"tokens, {differ} of the student's with another id); give distill.token_map (student "
        "id -> teacher id) or a teacher with the student's tokenizer"
    )


def load_token_map(path: Path) -> dict[int, int]:
    """``distill.token_map``: a JSON object of student id -> teacher id."""
    try:
        raw = json.loads(path.read_text())
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        return {int(k): int(v) for k, v in raw.items()}
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"distill.token_map: {path}: {exc}") from None


def map_tokens(ids: list[int], token_map: dict[int, int]) -> list[int]:
    """``ids`` in the teacher's vocabulary; an id the map lacks is refused, naming it."""
    try:
        return [token_map[i] for i in ids]
    except KeyError as exc:
        raise DataError(
            f"distill.token_map: student token id {exc.args[0]} has no teacher id"
        ) from None


def _chunks(n: int, size: int) -> Iterator[list[int]]:
    for start in range(0, n, size):
        yield list(range(start, min(n, start + size)))
