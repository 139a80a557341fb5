"""Layer 2: the embedded SQLite trajectory store."""

from trajforge.store.filters import TrajectoryFilter
from trajforge.store.sqlite import TrajectoryStore

__all__ = ["TrajectoryFilter", "TrajectoryStore"]
