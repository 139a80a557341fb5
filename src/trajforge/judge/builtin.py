"""Registers the built-in scorers by name (imported lazily by ``get_scorer``)."""

from __future__ import annotations

from trajforge.judge.process import ProcessScorer
from trajforge.judge.rules import (
    Contains,
    EnvVerifier,
    ExactMatch,
    NormalizedMatch,
    NumericMatch,
    RegexMatch,
    TableMatch,
)
from trajforge.judge.scorer import register_scorer

for _factory in (
    ExactMatch,
    NormalizedMatch,
    NumericMatch,
    RegexMatch,
    Contains,
    TableMatch,
    EnvVerifier,
    ProcessScorer,
):
    register_scorer(_factory.name, _factory)
