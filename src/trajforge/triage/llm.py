"""The LLM localiser: any policy, given criteria, names where a trajectory first went wrong.

It reads the conversation with each message's index (as the LLM judge renders it) and must
answer one JSON object ``{"first_error": <index or null>, "reason": "..."}``. The reply is
parsed strictly: an index that is not an assistant message's, or no JSON, is retried and,
after the last try, recorded as a failed score; a step is never guessed.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trajforge.errors import ConfigError
from trajforge.judge import as_text, json_in_reply, render_trajectory
from trajforge.policy import Policy, SamplingParams
from trajforge.schema import Evaluator, EvaluatorKind, Message, Role, Score, Trajectory
from trajforge.store import TrajectoryStore
from trajforge.triage.first_error import TriageVerdict

PROMPT_VERSION = "triage-llm/1"
SCORE_NAME = "triage_llm"
_OBJECT = re.compile(r"\{.*?\}", re.S)


class LocaliserCriteria(BaseModel):
    """What the localiser is told counts as an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "first-error"
    version: str = "1"
    instructions: str = Field(
        default=(
            "You review the conversation of a tool-using AI assistant and find the first step "
            "where the assistant went wrong: a tool call that failed or could not be parsed, a "
            "call repeated without learning anything new, an answer given without the needed "
            "tool, or a wrong final answer. Messages are numbered [i]; only ASSISTANT messages "
            "can be the error."
        )
    )

    @classmethod
    def load(cls, path: Path) -> LocaliserCriteria:
        """Criteria from a YAML or JSON file (``name``, ``version``, ``instructions``).

        Raises:
            ConfigError: the file is missing or not such criteria.
        """
        try:
            data = yaml.safe_load(path.read_text())
            return cls.model_validate(data)
        except (OSError, yaml.YAMLError, ValidationError) as exc:
            first = str(exc).strip().splitlines()[0]
            raise ConfigError(f"{path}: not localiser criteria: {first}") from None


class LocaliserReplyError(ValueError):
    """The localiser's reply is not a verdict in the required format."""


def parse_location(text: str, assistant_steps: set[int]) -> tuple[int | None, str]:
    """The step and reason of a reply: one JSON object whose ``first_error`` is null or an
    assistant message's index."""
    data = json_in_reply(text, LocaliserReplyError, _OBJECT)
    if not isinstance(data, dict) or "first_error" not in data:
        raise LocaliserReplyError("the reply has no first_error")
    step = data["first_error"]
    reason = as_text(data.get("reason", ""))
    if step is None:
        return None, reason
    if isinstance(step, bool) or not isinstance(step, int) or step not in assistant_steps:
        raise LocaliserReplyError(f"first_error {step!r} is not an assistant message's index")
    return step, reason


class LLMLocaliser:
    """A scorer: ``triage_llm`` is 1.0 when the policy finds no error, 0.0 when it names one
    (``dimensions["first_error"]``, the reason in the explanation)."""

    name = SCORE_NAME
    kind = EvaluatorKind.LLM

    def __init__(
        self,
        policy: Policy,
        criteria: LocaliserCriteria | None = None,
        *,
        max_retries: int = 1,
        max_chars: int = 6000,
        sampling: SamplingParams | None = None,
    ) -> None:
        self.policy = policy
        self.criteria = criteria or LocaliserCriteria()
        self.max_retries = max_retries
        self.max_chars = max_chars
        self.sampling = sampling or SamplingParams(temperature=0.0, max_new_tokens=96)
        self.failures = 0

    def prompt(self, trajectory: Trajectory) -> list[Message]:
        convo, cut_note = render_trajectory(trajectory, self.max_chars)
        system = (
            f"{self.criteria.instructions}\n\nAnswer with exactly one JSON object and nothing "
            'else: {"first_error": <the index of the first wrong assistant message, or null '
            'if nothing went wrong>, "reason": "<one sentence>"}'
        )
        user = f"Task: {trajectory.task.prompt}\n\n"
        if cut_note:
            user += f"Note: {cut_note}\n\n"
        user += f"Conversation:\n{convo}\n\nYour verdict (one JSON object):"
        return [Message(role=Role.SYSTEM, content=system), Message(role=Role.USER, content=user)]

    def _evaluator(self) -> Evaluator:
        version = f"{PROMPT_VERSION};{self.criteria.name}@{self.criteria.version}"
        return Evaluator(
            kind=self.kind, name=self.name, model=self.policy.name, prompt_version=version
        )

    async def __call__(self, trajectory: Trajectory) -> Score:
        steps = {i for i, m in enumerate(trajectory.messages) if m.role is Role.ASSISTANT}
        prompt = self.prompt(trajectory)
        problems: list[str] = []
        for attempt in range(self.max_retries + 1):
            session = self.policy.start_session(prompt, [], task=trajectory.task)
            reply = await self.policy.respond(session, self.sampling, turn=attempt)
            try:
                step, reason = parse_location(reply.text, steps)
            except LocaliserReplyError as exc:
                problems.append(f"try {attempt + 1}: {exc}")
                continue
            dims = {} if step is None else {"first_error": float(step)}
            return Score(
                name=self.name,
                value=float(step is None),
                explanation=reason,
                evaluator=self._evaluator(),
                dimensions=dims,
            )
        self.failures += 1
        return Score(
            name=self.name,
            evaluator=self._evaluator(),
            error=f"no usable verdict after {self.max_retries + 1} tries: " + "; ".join(problems),
        )

    async def locate(self, trajectory: Trajectory) -> int | None:
        """The first-error step the policy names (``None``: none, or no usable verdict)."""
        score = await self(trajectory)
        step = score.dimensions.get("first_error")
        return None if step is None else int(step)


async def locate_unplaced(
    store: TrajectoryStore, verdicts: list[TriageVerdict], localiser: LLMLocaliser
) -> dict[str, Score]:
    """Ask ``localiser`` about each verdict's trajectory that failed with no step the rules
    could blame, storing its ``triage_llm`` score (replacing an earlier one); returns the
    scores by trajectory id."""
    found: dict[str, Score] = {}
    for verdict in verdicts:
        if verdict.unplaced:
            found[verdict.id] = await localiser(store.get(verdict.id))
    if found:
        store.replace_scores({k: [v] for k, v in found.items()}, SCORE_NAME)
    return found
