"""Triage: where each trajectory went wrong, found at scale without a model.

Contract:

- ``triage(trajectory, options) -> TriageVerdict``: the rule signals (``Signal``: tool errors,
  loops, malformed calls, truncation, context overflow, no final answer, an answer without the
  tool the task needs, a wrong answer, slow tools, a reward that contradicts the final message,
  infrastructure failures), each counted, and ``first_error``: the index into ``messages`` of
  the earliest step a policy signal blames (the assistant message that made the faulty call
  or gave the faulty ending), or ``None``. Pure: it reads the trajectory only, and any
  trajectory (no tool calls, no reward, an unknown env) gets the signals that apply.
- A verdict is stored as scores, the one judging vocabulary (``TriageVerdict.scores``):
  ``triage`` (1 clean, 0 not; the counts and ``first_error`` as dimensions) and
  ``triage.<signal>`` per signal found, so the store's score filter selects by signal.
- ``triage_store`` triages a store's trajectories and stores the verdicts (replacing older
  ones); ``failure_table`` / ``stored_failure_table`` sum them per run.
- ``triage.llm.LLMLocaliser``: any policy, with criteria, names a first-error step and a reason
  (a score ``triage_llm``) for the failures in which the rules blame no call
  (``TriageVerdict.unplaced``; ``locate_unplaced``).
"""

from typing import TYPE_CHECKING

from trajforge.registry import lazy_names
from trajforge.triage.first_error import (
    SCORE_NAME,
    TriageVerdict,
    first_error,
    signal_score_name,
    triage,
)
from trajforge.triage.run import (
    RunFailures,
    failure_table,
    stored_failure_table,
    triage_runs,
    triage_store,
)
from trajforge.triage.signals import POLICY_SIGNALS, Signal, SignalHit, TriageOptions, detect

if TYPE_CHECKING:
    from trajforge.triage.llm import LLMLocaliser, LocaliserCriteria, locate_unplaced

__all__ = [
    "POLICY_SIGNALS",
    "SCORE_NAME",
    "LLMLocaliser",
    "LocaliserCriteria",
    "RunFailures",
    "Signal",
    "SignalHit",
    "TriageOptions",
    "TriageVerdict",
    "detect",
    "failure_table",
    "first_error",
    "locate_unplaced",
    "signal_score_name",
    "stored_failure_table",
    "triage",
    "triage_runs",
    "triage_store",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "LLMLocaliser": "llm",
        "LocaliserCriteria": "llm",
        "locate_unplaced": "llm",
    },
)
