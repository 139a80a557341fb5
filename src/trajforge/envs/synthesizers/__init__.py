"""Per-environment rules of task synthesis: how an explorer acts in an env, and how the state one
exploration episode reached becomes a task of that env (``trajforge.synthesis`` runs them)."""

from __future__ import annotations

import importlib
from typing import TypeVar

from trajforge.envs.synthesizers import retail_blueprints, sql_blueprints
from trajforge.envs.synthesizers.base import Blueprint, Candidate, Proposer, Synthesizer, refuse_env
from trajforge.envs.synthesizers.boards import BOARD_SYNTHESIZERS
from trajforge.envs.synthesizers.calculator import CalculatorSynthesizer

SYNTHESIZERS: dict[str, Synthesizer] = {**BOARD_SYNTHESIZERS, "calculator": CalculatorSynthesizer()}

WEB_PREFIX = "miniwob:"
# Imported by name only when a MiniWoB++ env is named: it loads Playwright.
WEB_MODULE = "trajforge.envs.synthesizers.web"


PROPOSERS: dict[str, Proposer] = {
    "retail": retail_blueprints.propose,
    "sql": sql_blueprints.propose,
}
"""Blueprint proposers of tool environments, by env name."""


def synthesizer_for(env: str) -> Synthesizer:
    """The explorer and relabelling rules of env ``env``.

    Raises:
        ConfigError: none knows ``env`` (one line naming the envs tasks are synthesized for),
            or a MiniWoB++ task whose page is no form.
    """
    if env.startswith(WEB_PREFIX):
        synthesizer: Synthesizer = importlib.import_module(WEB_MODULE).WebSynthesizer(env)
        return synthesizer
    return _known(SYNTHESIZERS, env)


def proposer_for(env: str) -> Proposer:
    """The blueprint proposer of env ``env``.

    Raises:
        ConfigError: none knows ``env`` (one line naming the envs tasks are synthesized for).
    """
    return _known(PROPOSERS, env)


Found = TypeVar("Found")


def _known(found: dict[str, Found], env: str) -> Found:
    if env not in found:
        raise refuse_env(env, [*sorted(SYNTHESIZERS), f"{WEB_PREFIX}TASK"], sorted(PROPOSERS))
    return found[env]


__all__ = [
    "PROPOSERS",
    "SYNTHESIZERS",
    "Blueprint",
    "Candidate",
    "Synthesizer",
    "proposer_for",
    "synthesizer_for",
]
