"""The environments tasks can be synthesized for, by name."""

from __future__ import annotations

from trajforge.synthesis.base import Synthesizer, refuse_env
from trajforge.synthesis.boards import BOARD_SYNTHESIZERS
from trajforge.synthesis.calculator import CalculatorSynthesizer

SYNTHESIZERS: dict[str, Synthesizer] = {**BOARD_SYNTHESIZERS, "calculator": CalculatorSynthesizer()}


def synthesizer_for(env: str) -> Synthesizer:
    """The synthesizer of env ``env``.

    Raises:
        ConfigError: no synthesizer knows ``env`` (one line naming those that exist).
    """
    found = SYNTHESIZERS.get(env)
    if found is None:
        raise refuse_env(env, sorted(SYNTHESIZERS))
    return found
