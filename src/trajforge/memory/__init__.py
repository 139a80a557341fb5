"""Experience memory (layer 5, beside curate): lessons distilled from stored trajectories
(``distil``), kept in a JSONL memory file with their provenance (``items``), retrieved by BM25
(``trajforge.retrieval``) into a run's prompts and grown as it runs (``live``)."""

from typing import TYPE_CHECKING

from trajforge.registry import lazy_names

if TYPE_CHECKING:
    from trajforge.memory.distil import RULES, build_memory, stored_episodes
    from trajforge.memory.items import read_memory
    from trajforge.memory.live import DEFAULT_K, MEMORY_KEY, Memory, read_with

__all__ = [
    "DEFAULT_K",
    "MEMORY_KEY",
    "RULES",
    "Memory",
    "build_memory",
    "read_memory",
    "read_with",
    "stored_episodes",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "DEFAULT_K": "live",
        "MEMORY_KEY": "live",
        "Memory": "live",
        "RULES": "distil",
        "build_memory": "distil",
        "read_memory": "items",
        "read_with": "live",
        "stored_episodes": "distil",
    },
)
