"""The trajectory table's query string: the store's ``TrajectoryFilter`` plus sort and page,
checked field by field.

A bad value or an unknown parameter is a ``FilterError`` naming the parameter, which the app
answers with a 400 (a page or JSON). The filter's ``text`` is the parameter ``q``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from pydantic import Field

from trajforge.errors import TrajforgeError
from trajforge.store import (
    DEFAULT_PAGE,
    FILTER_FIELDS,
    MAX_PAGE,
    ORDER_COLUMNS,
    TrajectoryFilter,
    validate_named,
)

TEXT_PARAMETER = "q"


class FilterError(TrajforgeError):
    """A query parameter of the trajectory table is wrong; the message names it."""


class TableQuery(TrajectoryFilter):
    """What the trajectory table shows: a filter, the sort and the page."""

    sort: str = "created_at"
    desc: bool = True
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=DEFAULT_PAGE, ge=1, le=MAX_PAGE)

    def filter(self) -> TrajectoryFilter:
        """The store filter of this query."""
        return TrajectoryFilter.model_validate(self.model_dump(include=set(FILTER_FIELDS)))

    def url_params(self, **changes: Any) -> str:
        """This query as a query string (defaults left out), with ``changes`` applied."""
        data = self.model_dump(mode="json", exclude_defaults=True) | changes
        defaults = TableQuery().model_dump(mode="json")
        kept = {_parameter(k): v for k, v in data.items() if v is not None and v != defaults.get(k)}
        return urlencode({k: str(v).lower() if isinstance(v, bool) else v for k, v in kept.items()})


def _parameter(field: str) -> str:
    return TEXT_PARAMETER if field == "text" else field


_PARAMETERS = frozenset(_parameter(f) for f in TableQuery.model_fields)


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
        if key not in _PARAMETERS:
            raise FilterError(
                f"unknown parameter {key!r}; the table takes {', '.join(sorted(_PARAMETERS))}"
            )
        if value.strip():
            data["text" if key == TEXT_PARAMETER else key] = value.strip()
    data.update(fixed or {})
    if data.get("sort", "created_at") not in ORDER_COLUMNS:
        raise FilterError(
            f"sort: {data['sort']!r} is not one of {', '.join(sorted(ORDER_COLUMNS))}"
        )
    return validate_named(TableQuery, data, _parameter, FilterError)
