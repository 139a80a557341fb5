"""Layer 4: judging. Scorers (an env's verifier among them), ``Rubric`` (weighted scorers), rule
scorers, process metrics.

Importing the package registers the built-in scorers where they are defined (``rules``,
``process``), so ``get_scorer`` knows them whichever judge module was imported first.
"""

from typing import TYPE_CHECKING

from trajforge.judge.process import TOOL_ERROR_PREFIX, ProcessScorer
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
    ScorerRefs,
    VerifierScorer,
    default_refs,
    get_scorer,
    score_trajectory,
    scorer,
    scorer_class,
    scorer_names,
)
from trajforge.registry import lazy_names

if TYPE_CHECKING:
    from trajforge.judge.best_of import BEST_OF_KEY
    from trajforge.judge.best_of_run import BestOf, plan_best_of
    from trajforge.judge.criteria import JudgeCriteria, load_criteria
    from trajforge.judge.evaluation import Evaluation, close_scorers, evaluate
    from trajforge.judge.llm_judge import LLMJudge, as_text, json_in_reply, render_trajectory
    from trajforge.judge.meta_eval import meta_evaluate, read_labels
    from trajforge.judge.scoring import EvalSummary, ScoreSink, score_all, score_into, summarize
    from trajforge.judge.selectors import BEST_OF_OPTION, SELECT_OPTION
    from trajforge.judge.stats import (
        FailureSplit,
        RewardSummary,
        RewardTotals,
        format_rate,
        format_reward,
        format_scored,
        format_success,
        split_failures,
        summarize_reward_totals,
        summarize_rewards,
        summarize_rewards_by,
        wilson_ci95,
    )

__all__ = [
    "BEST_OF_KEY",
    "BEST_OF_OPTION",
    "SCORERS",
    "SELECT_OPTION",
    "TOOL_ERROR_PREFIX",
    "BestOf",
    "Contains",
    "EnvVerdict",
    "EvalSummary",
    "Evaluation",
    "ExactMatch",
    "FailureSplit",
    "JudgeCriteria",
    "LLMJudge",
    "NormalizedMatch",
    "NumericMatch",
    "ProcessScorer",
    "RegexMatch",
    "RewardSummary",
    "RewardTotals",
    "Rubric",
    "ScoreSink",
    "Scorer",
    "ScorerRef",
    "ScorerRefs",
    "TableMatch",
    "VerifierScorer",
    "as_text",
    "close_scorers",
    "default_refs",
    "evaluate",
    "format_rate",
    "format_reward",
    "format_scored",
    "format_success",
    "get_scorer",
    "json_in_reply",
    "load_criteria",
    "meta_evaluate",
    "plan_best_of",
    "read_labels",
    "render_trajectory",
    "score_all",
    "score_into",
    "score_trajectory",
    "scorer",
    "scorer_class",
    "scorer_names",
    "split_failures",
    "summarize",
    "summarize_reward_totals",
    "summarize_rewards",
    "summarize_rewards_by",
    "wilson_ci95",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "BEST_OF_KEY": "best_of",
        "BEST_OF_OPTION": "selectors",
        "BestOf": "best_of_run",
        "EvalSummary": "scoring",
        "Evaluation": "evaluation",
        "FailureSplit": "stats",
        "JudgeCriteria": "criteria",
        "LLMJudge": "llm_judge",
        "RewardSummary": "stats",
        "RewardTotals": "stats",
        "SELECT_OPTION": "selectors",
        "ScoreSink": "scoring",
        "as_text": "llm_judge",
        "close_scorers": "evaluation",
        "evaluate": "evaluation",
        "format_rate": "stats",
        "format_reward": "stats",
        "format_scored": "stats",
        "format_success": "stats",
        "json_in_reply": "llm_judge",
        "load_criteria": "criteria",
        "meta_evaluate": "meta_eval",
        "plan_best_of": "best_of_run",
        "read_labels": "meta_eval",
        "render_trajectory": "llm_judge",
        "score_all": "scoring",
        "score_into": "scoring",
        "split_failures": "stats",
        "summarize": "scoring",
        "summarize_reward_totals": "stats",
        "summarize_rewards": "stats",
        "summarize_rewards_by": "stats",
        "wilson_ci95": "stats",
    },
)
