"""The settings of on-policy distillation (``distill:`` in an RL config, the whole of a
``trajforge train distill`` run): which teacher scores the student's tokens, what privileged
context it reads, and how its per-token signal weighs against the outcome's.

Every key is documented by the docstring under it: ``trajforge config show`` and
``docs/configuration.md`` are generated from them.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import Field, model_validator

from trajforge.train.settings import ConfigModel

SELF_TEACHER = "self"
"""``teacher: self``: the weights being trained score the tokens (self-distillation)."""


class Privileged(StrEnum):
    """What the teacher is told that the student was not (self-distillation with privileged
    context)."""

    NONE = "none"
    ANSWER = "answer"
    EXPERT = "expert"


class DistillSettings(ConfigModel):
    """On-policy distillation (GKD; tinker-cookbook's recipe): the student samples its
    episodes, the teacher scores every sampled token in the same context, and each token's
    advantage is ``-coef * (log p_student - log p_teacher)``, the negated per-token reverse KL
    (docs/algorithms.md), added to ``outcome_weight`` times the estimator's outcome advantage."""

    teacher: str = SELF_TEACHER
    """The teacher: ``self`` (the weights being trained, given the ``privileged`` context),
    ``embedded``, ``tiny``, ``pocket``, a model folder or training checkpoint (loaded frozen
    beside the student), or ``openai:<base_url>#<model>``, a server whose ``/completions``
    returns the log-probabilities of given prompt tokens (``echo`` with ``logprobs``, as vLLM
    does). It must tokenize as the student does unless ``token_map`` is given."""
    privileged: Privileged = Privileged.NONE
    """Context only the teacher reads, as a user message after the task's opening messages:
    ``answer`` (the task's gold answer), ``expert`` (the env's scripted expert's first reply,
    its plan), ``none``."""
    coef: float = Field(default=1.0, gt=0)
    """Weight of the reverse-KL advantage (tinker-cookbook's ``kl_penalty_coef``)."""
    outcome_weight: float = Field(default=0.0, ge=0)
    """Weight of the estimator's outcome advantage beside the teacher's (0: pure on-policy
    distillation; 1: RL with the teacher's per-token term added)."""
    token_map: Path | None = None
    """A JSON object ``{"student_id": teacher_id, ...}`` mapping every student token id the
    episodes hold to the teacher's, for a teacher with another tokenizer (null: the two
    tokenizers must be the same)."""
    max_batch_size: int = Field(default=8, ge=1)
    """Sequences the teacher scores in one forward pass or request."""
    timeout_s: float = Field(default=120.0, gt=0)
    """Seconds one request to an ``openai:`` teacher may take."""

    @model_validator(mode="after")
    def _teacher_differs(self) -> DistillSettings:
        if self.teacher == SELF_TEACHER and self.privileged is Privileged.NONE:
            raise ValueError(
                "teacher: self with privileged: none scores every token as the student did "
                "(every advantage 0); set privileged (answer or expert) or name another teacher"
            )
        return self
