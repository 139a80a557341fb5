"""The token view of a trajectory: every context token with its text, loss mask and logprob.

Ids are decoded with the trajectory's tokenizer when it loads cheaply: SmolLM2's (the
``embedded``, ``tiny`` and scripted policies, no weights loaded) or the ``tokenizer.json`` of a
local model folder; otherwise the view shows the ids alone and says why.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from trajforge.errors import TrajforgeError
from trajforge.policy import RENDERED_WITH, SMOLLM2_NAMES, load_tokenizer
from trajforge.schema import Role, Trajectory

_CACHE: dict[str, Tokenizer | str] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Decoder:
    """A loaded tokenizer (``tokenizer``) or the reason there is none (``missing``)."""

    name: str | None
    tokenizer: Tokenizer | None
    missing: str | None

    def pieces(self, ids: list[int]) -> list[str] | None:
        """Each id's own text, or None without a tokenizer."""
        if self.tokenizer is None:
            return None
        return self.tokenizer.decode_batch([[i] for i in ids], skip_special_tokens=False)


def _load(name: str) -> Tokenizer | str:
    """The tokenizer called ``name``, or why it cannot be had cheaply."""
    if name in SMOLLM2_NAMES:
        try:
            return load_tokenizer().backend_tokenizer
        except TrajforgeError as exc:
            return f"SmolLM2's tokenizer is not available here: {exc}"
    folder = Path(name).expanduser()
    if (folder / "tokenizer.json").is_file():
        return Tokenizer.from_file(str(folder / "tokenizer.json"))
    return f"no tokenizer is known for model {name!r}"


def decoder_for(traj: Trajectory) -> Decoder:
    """The decoder of ``traj``'s ids: the tokenizer that rendered it, else its model's."""
    name = traj.metadata.get(RENDERED_WITH) or traj.model
    if not isinstance(name, str) or not name:
        return Decoder(None, None, "the trajectory names no model")
    with _LOCK:  # one load per name, even when two pages ask at once
        loaded = _CACHE.get(name)
        if loaded is None:
            loaded = _CACHE[name] = _load(name)
    if isinstance(loaded, str):
        return Decoder(name, None, loaded)
    return Decoder(name, loaded, None)


def _colour(logprob: float | None) -> str | None:
    """The background of a sampled token: green when the policy was sure, red when not."""
    if logprob is None:
        return None
    p = math.exp(max(logprob, -50.0))
    return f"hsl({120 * p:.0f}, 70%, 80%)"


def token_view(traj: Trajectory, decoder: Decoder) -> list[dict[str, Any]]:
    """One entry per message: its role, turn, per-turn reward, state key and tokens, each token
    ``{id, text, mask, logprob, colour}`` (``mask``: the loss covers it: assistant-sampled)."""
    view: list[dict[str, Any]] = []
    turn = 0
    position = 0
    for index, msg in enumerate(traj.messages):
        ids = msg.token_ids or []
        pieces = decoder.pieces(ids) if ids else []
        sampled = msg.role is Role.ASSISTANT
        logprobs = msg.logprobs or []
        tokens = [
            {
                "position": position + k,
                "id": token_id,
                "text": None if pieces is None else pieces[k],
                "mask": sampled,
                "logprob": logprobs[k] if k < len(logprobs) else None,
                "colour": _colour(logprobs[k] if k < len(logprobs) else None),
            }
            for k, token_id in enumerate(ids)
        ]
        position += len(ids)
        view.append(
            {
                "index": index,
                "role": msg.role.value,
                "turn": turn if sampled else None,
                "reward": msg.reward,
                "state_key": msg.state_key,
                "tokenized": msg.token_ids is not None,
                "tokens": tokens,
            }
        )
        turn += sampled
    return view
