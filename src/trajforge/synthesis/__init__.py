"""Layer 5: training tasks made by the environment itself. Reverse task synthesis (explore,
then describe the state reached as a task its verifier checks, re-checked by execution) and
blueprints for tool environments (a task and its ground-truth actions, validated by executing
them, then played with the simulated user)."""

from __future__ import annotations

from trajforge.synthesis.explore import (
    RANDOM_EXPLORER,
    SynthesisReport,
    SynthesisSettings,
    check_by_execution,
    synthesize,
)

__all__ = [
    "RANDOM_EXPLORER",
    "SynthesisReport",
    "SynthesisSettings",
    "check_by_execution",
    "synthesize",
]
