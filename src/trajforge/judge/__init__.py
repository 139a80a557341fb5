"""Layer 4: judging. Scorers, ``Rubric`` (weighted scorers), rule scorers, process metrics.

Importing the package registers the built-in scorers where they are defined (``rules``,
``process``), so ``get_scorer`` knows them whichever judge module was imported first.
"""

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
from trajforge.judge.scorer import (
    SCORERS,
    Rubric,
    Scorer,
    ScorerRef,
    get_scorer,
    score_trajectory,
    scorer,
    scorer_class,
    scorer_names,
)

__all__ = [
    "SCORERS",
    "Contains",
    "EnvVerifier",
    "ExactMatch",
    "NormalizedMatch",
    "NumericMatch",
    "ProcessScorer",
    "RegexMatch",
    "Rubric",
    "Scorer",
    "ScorerRef",
    "TableMatch",
    "get_scorer",
    "score_trajectory",
    "scorer",
    "scorer_class",
    "scorer_names",
]
