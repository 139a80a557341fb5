"""Per-environment rules of task synthesis: how an explorer acts in an env, and how the state one
exploration episode reached becomes a task of that env (``trajforge.synthesis`` runs them)."""

from __future__ import annotations

from trajforge.envs.synthesizers import retail_blueprints, sql_blueprints
from trajforge.envs.synthesizers.base import Blueprint, Candidate, Proposer, Synthesizer, refuse_env
from trajforge.envs.synthesizers.boards import BOARD_SYNTHESIZERS
from trajforge.envs.synthesizers.calculator import CalculatorSynthesizer

SYNTHESIZERS: dict[str, Synthesizer] = {**BOARD_SYNTHESIZERS, "calculator": CalculatorSynthesizer()}


PROPOSERS: dict[str, Proposer] = {
    "retail": retail_blueprints.propose,
    "sql": sql_blueprints.propose,
}
"""Blueprint proposers of tool environments, by env name."""


def synthesizer_for(env: str) -> Synthesizer:
    """The synthesizer of env ``env``.

    Raises:
        ConfigError: no synthesizer knows ``env`` (one line naming those that exist).
    """
    found = SYNTHESIZERS.get(env)
    if found is None:
        raise refuse_env(env, sorted(SYNTHESIZERS), sorted(PROPOSERS))
    return found


def proposer_for(env: str) -> Proposer:
    """The blueprint proposer of env ``env``.

    Raises:
        ConfigError: no proposer knows ``env`` (one line naming those that exist).
    """
    found = PROPOSERS.get(env)
    if found is None:
        raise refuse_env(env, sorted(SYNTHESIZERS), sorted(PROPOSERS))
    return found


__all__ = [
    "PROPOSERS",
    "SYNTHESIZERS",
    "Blueprint",
    "Candidate",
    "Synthesizer",
    "proposer_for",
    "synthesizer_for",
]
