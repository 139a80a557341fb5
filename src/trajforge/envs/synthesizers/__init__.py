"""Per-environment rules of task synthesis: how an explorer acts in an env, and how the state one
exploration episode reached becomes a task of that env (``trajforge.synthesis`` runs them)."""

from __future__ import annotations

from trajforge.envs.synthesizers.base import Candidate, Synthesizer, refuse_env
from trajforge.envs.synthesizers.boards import BOARD_SYNTHESIZERS
from trajforge.envs.synthesizers.calculator import CalculatorSynthesizer

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


__all__ = ["SYNTHESIZERS", "Candidate", "Synthesizer", "synthesizer_for"]
