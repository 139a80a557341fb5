"""Layer 2: the embedded SQLite trajectory store."""

from trajforge.store.browse import DEFAULT_PAGE, MAX_PAGE
from trajforge.store.filters import FILTER_FIELDS, TrajectoryFilter, validate_named
from trajforge.store.lookup import AmbiguousIdError
from trajforge.store.rows import ORDER_COLUMNS
from trajforge.store.sqlite import TrajectoryStore

__all__ = [
    "DEFAULT_PAGE",
    "FILTER_FIELDS",
    "MAX_PAGE",
    "ORDER_COLUMNS",
    "AmbiguousIdError",
    "TrajectoryFilter",
    "TrajectoryStore",
    "validate_named",
]
