"""Layer 7: the trajectory viewer (``trajforge view``), a local web app over one store.

Pages at stable URLs (``/``, ``/runs/{run}``, ``/trajectories``, ``/trajectories/{id}``,
``/groups/{group}``, ``/diff/{a}/{b}``) and the same data as JSON under ``/api/``. Every page
reads the store with paged SQL (``store.browse``), never the whole store; ids take unique
prefixes; a run still being written streams its new trajectories as server-sent events. Bad ids
and filters answer with a page or a 4xx JSON error naming the problem, never a traceback.

Importing this package imports nothing; ``viewer.app.create_app`` builds the FastAPI app and
``report.view_command.view_command`` is the command line that opens a run folder.
"""
