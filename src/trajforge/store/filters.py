"""``TrajectoryFilter``: the one trajectory filter, which the store's queries, the CLI's ``ls``,
``stats`` and ``export`` options and the viewer's table all build and the store turns into SQL.

Every field is optional and the given ones combine with AND. A value that no trajectory could
match (an empty reward range, a score bound without a score) is refused when the filter is
made, with the field named as the caller spells it (``--min-reward`` on the command line,
``min_reward`` in a URL), rather than answered with an empty listing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails

from trajforge.errors import StoreError
from trajforge.schema import OutcomeStatus
from trajforge.store.text_index import text_clause

Spell = Callable[[str], str]
"""How a caller writes a field's name in its messages (``min_reward`` -> ``--min-reward``)."""

_STATUSES = ", ".join(s.value for s in OutcomeStatus)


class FilterProblem(ValueError):
    """A filter that nothing could match; its text names the fields as the caller spells them."""

    def __init__(self, template: str, **fields: str) -> None:
        super().__init__(template.format(**fields))
        self.template = template
        self.fields = fields

    def text(self, spell: Spell) -> str:
        return self.template.format(**{k: spell(v) for k, v in self.fields.items()})


class TrajectoryFilter(BaseModel):
    """Which stored trajectories a query, listing or page covers.

    ``model`` is the exact model name; ``text`` a case-insensitive substring of any message's
    content or tool calls (words as the full-text index splits them: see
    ``store.text_index``). ``min_score``/``max_score`` bound the latest value of ``score``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    run: str | None = None
    env: str | None = None
    status: OutcomeStatus | None = None
    task: str | None = None
    group: str | None = None
    model: str | None = None
    min_reward: float | None = Field(default=None, allow_inf_nan=False)
    max_reward: float | None = Field(default=None, allow_inf_nan=False)
    score: str | None = None
    min_score: float | None = Field(default=None, allow_inf_nan=False)
    max_score: float | None = Field(default=None, allow_inf_nan=False)
    text: str | None = None

    @model_validator(mode="after")
    def _can_match(self) -> TrajectoryFilter:
        for low, high in (("min_reward", "max_reward"), ("min_score", "max_score")):
            lo, hi = getattr(self, low), getattr(self, high)
            if lo is not None and hi is not None and lo > hi:
                raise FilterProblem(
                    f"{{low}}: {lo:g} is above {{high}} {hi:g}; nothing can match",
                    low=low,
                    high=high,
                )
        for bound in ("min_score", "max_score"):
            if getattr(self, bound) is not None and self.score is None:
                raise FilterProblem(
                    "{bound}: name the score it filters on with {score}", bound=bound, score="score"
                )
        return self


FILTER_FIELDS = frozenset(TrajectoryFilter.model_fields)

M = TypeVar("M", bound=BaseModel)


def _explain(err: ErrorDetails, spell: Spell) -> str:
    error = err.get("ctx", {}).get("error")
    if isinstance(error, FilterProblem):
        return error.text(spell)
    field = next((str(p) for p in err["loc"] if isinstance(p, str)), "filter")
    got = err.get("input")
    if err["type"] == "finite_number":
        return f"{spell(field)}: must be a finite number, got {got}"
    if err["type"] == "enum" and field == "status":
        return f"{spell(field)}: {got!r} is not one of {_STATUSES}"
    if err["type"] == "extra_forbidden":
        return f"{spell(field)}: not a filter (filters: {', '.join(sorted(FILTER_FIELDS))})"
    return f"{spell(field)}: {err['msg']} (got {got!r})"


def validate_named(
    model: type[M], data: Mapping[str, Any], spell: Spell = str, error: type[Exception] = StoreError
) -> M:
    """``model`` (``TrajectoryFilter`` or a model that extends it) from ``data``; the first
    problem is an ``error`` of one line naming the field as ``spell`` writes it."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(_explain(exc.errors()[0], spell)) from None


def as_filter(where: TrajectoryFilter | None, fields: Mapping[str, Any]) -> TrajectoryFilter:
    """``where`` with ``fields`` (filter keywords) applied over it; ``StoreError`` naming a bad
    or unknown one."""
    if where is None:
        return validate_named(TrajectoryFilter, fields)
    if not fields:
        return where
    return validate_named(TrajectoryFilter, {**where.model_dump(exclude_none=True), **fields})


def where_clause(where: TrajectoryFilter) -> tuple[str, list[Any]]:
    """The WHERE clause (over ``trajectories t``) of ``where`` and its parameters; every
    condition reads the summary table, its indexes or the text index, never a body."""
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("run_id", where.run),
        ("env", where.env),
        ("status", where.status),
        ("task_id", where.task),
        ("group_id", where.group),
        ("model", where.model),
    ):
        if value is not None:
            clauses.append(f"t.{column} = ?")
            params.append(str(value))
    for bound, op in ((where.min_reward, ">="), (where.max_reward, "<=")):
        if bound is not None:
            clauses.append(f"t.reward {op} ?")
            params.append(bound)
    if where.score is not None:
        sub = "SELECT 1 FROM scores s WHERE s.traj_rowid = t.rowid AND s.name = ?"
        params.append(where.score)
        for bound, op in ((where.min_score, ">="), (where.max_score, "<=")):
            if bound is not None:
                sub += f" AND s.value {op} ?"
                params.append(bound)
        clauses.append(f"EXISTS ({sub})")
    if where.text:
        clause, text_params = text_clause(where.text)
        clauses.append(clause)
        params.extend(text_params)
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", params
