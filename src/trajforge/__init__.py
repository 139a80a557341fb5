"""trajforge: collect, judge, curate and train on multi-turn LLM-agent trajectories."""

import os

# torch's OpenMP threads spin for a while after every parallel region. The decode engine runs
# thousands of small regions per second beside an event loop, and on a CPU shared with anything
# else (another job, the event loop itself) the spinning threads take the cores the work needs:
# batched decode fell 3-7x under load with spinning, not with passive waits
# (docs/benchmarks.md, Generation). It must be set before torch loads OpenMP; a user's own
# setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from trajforge.schema import SCHEMA_VERSION

__version__ = "0.1.0"
__all__ = ["SCHEMA_VERSION", "__version__"]
