"""An LLM judge: any ``Policy`` scores a trajectory against criteria with named dimensions.

The judge must answer with one JSON object holding every dimension (and an ``explanation``).
The verdict is parsed strictly; an unparsable or out-of-range verdict is retried, and after the
last try recorded as a failed score. A verdict is never guessed.
"""

from __future__ import annotations

import json
import re
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, ClassVar

from trajforge.judge.criteria import JudgeCriteria, load_criteria
from trajforge.policy import Policy, SamplingParams
from trajforge.schema import (
    Evaluator,
    EvaluatorKind,
    Message,
    Role,
    Score,
    Trajectory,
    image_label,
)

PROMPT_VERSION = "llm-judge/1"

_OBJECT = re.compile(r"\{.*\}", re.S)


class VerdictParseError(ValueError):
    """The judge's reply is not a verdict in the required format."""


def render_trajectory(trajectory: Trajectory, max_chars: int) -> tuple[str, str | None]:
    """The conversation as plain text, condensed to ``max_chars`` by dropping middle messages.

    Returns the text and, when a cut was made, a sentence stating it (for the prompt).
    """
    blocks = []
    for i, m in enumerate(trajectory.messages):
        if m.role is Role.SYSTEM:
            continue
        lines = [f"[{i}] {m.role.value.upper()}" + (f" ({m.name})" if m.name else "") + ":"]
        if m.text:
            lines.append(m.text.strip())
        # A text judge cannot see an image: it is told one was there, not left to guess.
        lines.extend(f"  {image_label(image)}" for image in m.images)
        for c in m.tool_calls:
            if c.parse_error:
                lines.append(f"  -> unparsable tool call ({c.parse_error}): {c.raw}")
            else:
                lines.append(f"  -> call {c.name}({json.dumps(c.arguments, sort_keys=True)})")
        blocks.append("\n".join(lines))
    text = "\n\n".join(blocks)
    if len(text) <= max_chars or len(blocks) <= 2:
        return text[:max_chars], None if len(text) <= max_chars else "The text was truncated."
    head, tail = [blocks[0]], list(blocks[1:])
    budget = max_chars - len(blocks[0]) - 200
    kept: list[str] = []
    while tail and len(tail[-1]) + sum(len(b) + 2 for b in kept) <= budget:
        kept.insert(0, tail.pop())
    omitted = len(tail)
    note = (
        f"The trajectory was condensed to fit: {omitted} middle message(s) "
        f"({sum(len(b) for b in tail)} characters) were omitted."
    )
    cut = f"[... {omitted} message(s) omitted ...]"
    return "\n\n".join([*head, cut, *kept]), note


def judge_prompt(criteria: JudgeCriteria, trajectory: Trajectory, max_chars: int) -> list[Message]:
    convo, cut_note = render_trajectory(trajectory, max_chars)
    dims = "\n".join(
        f'- "{d.name}": {d.description} Allowed values: {d.values}.' for d in criteria.dimensions
    )
    example = {d.name: d.values[0] for d in criteria.dimensions} | {"explanation": "..."}
    system = (
        f"{criteria.instructions}\n\nDimensions:\n{dims}\n\n"
        'Answer with exactly one JSON object with one key per dimension and an "explanation" '
        f"string, and nothing else. Example: {json.dumps(example)}"
    )
    user = f"Task: {trajectory.task.prompt}\n\n"
    if cut_note:
        user += f"Note: {cut_note}\n\n"
    user += f"Trajectory:\n{convo}\n\nYour verdict (one JSON object):"
    return [Message(role=Role.SYSTEM, content=system), Message(role=Role.USER, content=user)]


def json_in_reply(text: str, error: type[ValueError], found: re.Pattern[str] = _OBJECT) -> Any:
    """The JSON that ``found`` (by default: from the first ``{`` to the last ``}``) finds in a
    model's reply; ``error`` when it finds nothing or what it finds is not JSON."""
    match = found.search(text)
    if match is None:
        raise error("no JSON object in the reply")
    try:
        return json.loads(match.group(0))
    except json.JSONDecodeError as exc:
        raise error(f"invalid JSON: {exc.msg}") from None


def as_text(value: Any) -> str:
    """A reply's free-text field as text (a model may answer it with any JSON value)."""
    return value if isinstance(value, str) else json.dumps(value)


def parse_verdict(text: str, criteria: JudgeCriteria) -> tuple[dict[str, int], str]:
    """Parse a verdict strictly: one JSON object, every dimension present with an allowed value."""
    data = json_in_reply(text, VerdictParseError)
    if not isinstance(data, dict):
        raise VerdictParseError("the verdict is not a JSON object")
    allowed = {d.name for d in criteria.dimensions} | {"explanation"}
    extra = sorted(set(data) - allowed)
    if extra:
        raise VerdictParseError(f"unexpected keys {extra}")
    values: dict[str, int] = {}
    for dim in criteria.dimensions:
        if dim.name not in data:
            raise VerdictParseError(f"missing dimension {dim.name!r}")
        v = data[dim.name]
        if isinstance(v, bool) or not isinstance(v, int) or v not in dim.values:
            raise VerdictParseError(f"{dim.name!r} must be one of {dim.values}, got {v!r}")
        values[dim.name] = v
    return values, as_text(data.get("explanation", ""))


@dataclass(eq=False)
class LLMJudge:
    """Scores trajectories with a policy as the judge; the score's value is the success
    dimension scaled to [0, 1], every dimension is kept in ``dimensions``."""

    kind: ClassVar[EvaluatorKind] = EvaluatorKind.LLM

    criteria: JudgeCriteria
    policy: Policy
    _: KW_ONLY
    name: str = "llm_judge"
    max_retries: int = 2
    max_chars: int = 6000
    sampling: SamplingParams = field(
        default_factory=lambda: SamplingParams(temperature=0.0, max_new_tokens=256)
    )

    def _evaluator(self) -> Evaluator:
        return Evaluator(
            kind=self.kind,
            name=self.name,
            model=self.policy.name,
            prompt_version=f"{PROMPT_VERSION};{self.criteria.name}@{self.criteria.version}",
        )

    async def __call__(self, trajectory: Trajectory) -> Score:
        prompt = judge_prompt(self.criteria, trajectory, self.max_chars)
        problems: list[str] = []
        for attempt in range(self.max_retries + 1):
            session = self.policy.start_session(prompt, [], task=trajectory.task)
            reply = await self.policy.respond(session, self.sampling, turn=attempt)
            try:
                values, explanation = parse_verdict(reply.text, self.criteria)
            except VerdictParseError as exc:
                problems.append(f"try {attempt + 1}: {exc}")
                continue
            dim = self.criteria.dimension(self.criteria.success_dimension)
            lo, hi = min(dim.values), max(dim.values)
            success = (values[dim.name] - lo) / (hi - lo)
            return Score(
                name=self.name,
                value=success,
                explanation=explanation,
                evaluator=self._evaluator(),
                dimensions={k: float(v) for k, v in values.items()},
            )
        return Score(
            name=self.name,
            evaluator=self._evaluator(),
            error=f"unparsable verdict after {self.max_retries + 1} tries: " + "; ".join(problems),
        )


def llm_judge(
    criteria: JudgeCriteria | str = "agentrewardbench", policy: Policy | None = None, **options: Any
) -> LLMJudge:
    """Build an LLM judge from criteria (object, built-in name or file) and a judge policy."""
    if policy is None:
        raise ValueError("llm_judge needs a policy to act as the judge")
    loaded = load_criteria(criteria) if isinstance(criteria, str) else criteria
    return LLMJudge(loaded, policy, **options)
