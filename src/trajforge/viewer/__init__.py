"""Layer 7: the trajectory viewer (``trajforge view``), a local web app over one store.

Pages at stable URLs (``/``, ``/runs/{run}``, ``/trajectories``, ``/trajectories/{id}``,
``/groups/{group}``, ``/diff/{a}/{b}``) and the same data as JSON under ``/api/``. Every page
reads the store with paged SQL (``store.browse``), never the whole store; ids take unique
prefixes; a run still being written streams its new trajectories as server-sent events. Bad ids
and filters answer with a page or a 4xx JSON error naming the problem, never a traceback.

Importing this package imports nothing; ``viewer.app.create_app`` builds the FastAPI app and
``report.links.view_command`` is the command line that opens a run folder.
"""

from typing import TYPE_CHECKING

from trajforge.registry import lazy_names

if TYPE_CHECKING:
    from trajforge.viewer.app import serve_viewer
    from trajforge.viewer.curves import METRICS_FILE

__all__ = [
    "METRICS_FILE",
    "serve_viewer",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "METRICS_FILE": "curves",
        "serve_viewer": "app",
    },
)
