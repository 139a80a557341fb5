"""Layer 4: judging. Scorers (an env's verifier among them), ``Rubric`` (weighted scorers), rule
scorers, process metrics.

Importing the package registers the built-in scorers where they are defined (``rules``,
``process``), so ``get_scorer`` knows them whichever judge module was imported first.
"""

from trajforge.judge.process import ProcessScorer
from trajforge.judge.rules import (
    Contains,
    ExactMatch,
    NormalizedMatch,
    NumericMatch,
    RegexMatch,
    TableMatch,
)
from trajforge.judge.scorer import (
    SCORERS,
    EnvVerdict,
    Rubric,
    Scorer,
    ScorerRef,
    VerifierScorer,
    get_scorer,
    score_trajectory,
    scorer,
    scorer_class,
    scorer_names,
)

__all__ = [
    "SCORERS",
    "Contains",
    "EnvVerdict",
    "ExactMatch",
    "NormalizedMatch",
    "NumericMatch",
    "ProcessScorer",
    "RegexMatch",
    "Rubric",
    "Scorer",
    "ScorerRef",
    "TableMatch",
    "VerifierScorer",
    "get_scorer",
    "score_trajectory",
    "scorer",
    "scorer_class",
    "scorer_names",
]
