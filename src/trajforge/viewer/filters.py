"""The trajectory table's query string: filters, sort and page, checked field by field.

A bad value or an unknown parameter is a ``FilterError`` naming the parameter, which the app
answers with a 400 (a page or JSON); valid queries become the store's filter keywords.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trajforge.errors import TrajforgeError
from trajforge.schema import OutcomeStatus
from trajforge.store.browse import DEFAULT_PAGE, MAX_PAGE
from trajforge.store.rows import ORDER_COLUMNS


class FilterError(TrajforgeError):
    """A query parameter of the trajectory table is wrong; the message names it."""


class TableQuery(BaseModel):
    """What the trajectory table shows: filters (all optional, combined with AND), sort, page."""

    model_config = ConfigDict(extra="forbid")

    run: str | None = None
    env: str | None = None
    status: OutcomeStatus | None = None
    task: str | None = None
    group: str | None = None
    model: str | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    score: str | None = None
    min_score: float | None = None
    max_score: float | None = None
    q: str | None = Field(default=None, description="text in any message")
    sort: str = "created_at"
    desc: bool = True
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=DEFAULT_PAGE, ge=1, le=MAX_PAGE)

    def store_filters(self) -> dict[str, Any]:
        """The store's filter keywords (``TrajectoryStore.page`` / ``count``)."""
        return {
            "run": self.run,
            "env": self.env,
            "status": None if self.status is None else self.status.value,
            "task": self.task,
            "group": self.group,
            "model": self.model,
            "min_reward": self.min_reward,
            "max_reward": self.max_reward,
            "score": self.score,
            "min_score": self.min_score,
            "max_score": self.max_score,
            "text": self.q,
        }

    def url_params(self, **changes: Any) -> str:
        """This query as a query string (defaults left out), with ``changes`` applied."""
        data = self.model_dump(mode="json", exclude_defaults=True) | changes
        defaults = TableQuery().model_dump(mode="json")
        kept = {k: v for k, v in data.items() if v is not None and v != defaults.get(k)}
        return urlencode({k: str(v).lower() if isinstance(v, bool) else v for k, v in kept.items()})


_FIELDS = frozenset(TableQuery.model_fields)


def parse_table_query(
    params: Mapping[str, str], *, fixed: Mapping[str, Any] | None = None
) -> TableQuery:
    """A ``TableQuery`` from query parameters; empty values count as absent. ``fixed`` values
    (a run page's run) override the parameters.

    Raises:
        FilterError: an unknown parameter or a bad value, named.
    """
    data: dict[str, Any] = {}
    for key, value in params.items():
        if key not in _FIELDS:
            raise FilterError(
                f"unknown parameter {key!r}; the table takes {', '.join(sorted(_FIELDS))}"
            )
        if value.strip():
            data[key] = value.strip()
    data.update(fixed or {})
    if data.get("sort", "created_at") not in ORDER_COLUMNS:
        raise FilterError(
            f"sort: {data['sort']!r} is not one of {', '.join(sorted(ORDER_COLUMNS))}"
        )
    try:
        query = TableQuery.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "query"
        raise FilterError(f"{where}: {first['msg']} (got {first.get('input')!r})") from None
    for low, high in (("min_reward", "max_reward"), ("min_score", "max_score")):
        lo, hi = getattr(query, low), getattr(query, high)
        if lo is not None and hi is not None and lo > hi:
            raise FilterError(f"{low}: {lo} is above {high} {hi}, so nothing can match")
    if (query.min_score is not None or query.max_score is not None) and query.score is None:
        raise FilterError("score: name the score that min_score/max_score filter on")
    return query
