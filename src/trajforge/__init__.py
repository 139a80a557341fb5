"""trajforge: collect, judge, curate and train on multi-turn LLM-agent trajectories."""

from trajforge.schema import SCHEMA_VERSION

__version__ = "0.1.0"
__all__ = ["SCHEMA_VERSION", "__version__"]
