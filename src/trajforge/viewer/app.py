"""The viewer's FastAPI app: HTML pages at stable URLs and the same data as JSON under ``/api``.

Pages render server-side with Jinja2 (autoescaped); a little vanilla JS (``static/viewer.js``)
switches a trajectory page between conversation and tokens, shows token ids on demand and
subscribes a run page to its server-sent events. Message images are served by content hash
from the store's image table (``/images/<sha256>``). A bad id, prefix, filter or estimator answers
with a page (or, under ``/api``, a JSON ``{"error": ...}``) naming the problem with a 4xx
status; nothing answers with a traceback.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, PackageLoader
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trajforge import __version__
from trajforge.errors import TrajforgeError
from trajforge.serve import serve_app_forever
from trajforge.store import MAX_PAGE, ORDER_COLUMNS
from trajforge.viewer.events import trajectory_events
from trajforge.viewer.filters import FilterError, TableQuery, parse_table_query
from trajforge.viewer.service import BadRequest, NotFound, ViewerData

STATIC_DIR = Path(__file__).parent / "static"
DEFAULT_EVENTS_S = 300.0
MAX_EVENTS_S = 3600.0
SHUTDOWN_S = 2
"""How long Ctrl-C waits for requests in flight; a browser's live stream is cut after it."""
TABLE_COLUMNS = (
    "id",
    "run_id",
    "task_id",
    "env",
    "model",
    "status",
    "reward",
    "turns",
    "tokens",
    "created_at",
)


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _when(stamp: float | None) -> str:
    return "-" if stamp is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))


def _templates() -> Environment:
    env = Environment(loader=PackageLoader("trajforge.viewer", "templates"), autoescape=True)
    env.filters["num"] = _num
    env.filters["when"] = _when
    env.globals["version"] = __version__
    return env


def _status_of(exc: Exception) -> int:
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, BadRequest | FilterError | TrajforgeError):
        return 400
    return 500


class ServerTiming:
    """ASGI middleware adding ``Server-Timing: app;dur=MS`` (the time until the response
    starts) to every response, which browsers' developer tools and ``bench/viewer.py`` read."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                ms = (time.perf_counter() - start) * 1000
                message.setdefault("headers", []).append(
                    (b"server-timing", f"app;dur={ms:.2f}".encode())
                )
            await send(message)

        await self.app(scope, receive, timed_send)


def create_app(data: ViewerData) -> FastAPI:
    """The viewer over ``data``'s store (pages, ``/api``, ``/static``)."""
    app = FastAPI(title="trajforge viewer", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(ServerTiming)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    templates = _templates()

    def page(name: str, code: int = 200, **context: Any) -> HTMLResponse:
        body = templates.get_template(name).render(store=str(data.store_path), **context)
        return HTMLResponse(body, status_code=code)

    def error_response(request: Request, status: int, message: str) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": message, "status": status}, status_code=status)
        return page(
            "error.html.j2", status, title=f"error {status}", status=status, message=message
        )

    @app.exception_handler(TrajforgeError)
    async def _ours(request: Request, exc: TrajforgeError) -> Response:
        return error_response(request, _status_of(exc), str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        message = f"no page at {request.url.path}" if exc.status_code == 404 else str(exc.detail)
        return error_response(request, exc.status_code, message)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "request"
        return error_response(request, 400, f"{where}: {first['msg']} (got {first.get('input')!r})")

    @app.exception_handler(Exception)
    async def _other(request: Request, exc: Exception) -> Response:
        return error_response(request, 500, f"{type(exc).__name__}: {exc}")

    def table_query(request: Request, fixed: Mapping[str, Any] | None = None) -> TableQuery:
        return parse_table_query(dict(request.query_params), fixed=fixed)

    def table_context(query: TableQuery, base: str) -> dict[str, Any]:
        table = data.table(query)
        return {
            "query": query,
            "table": table,
            "base": base,
            "columns": TABLE_COLUMNS,
            "sortable": ORDER_COLUMNS,
            "max_page": MAX_PAGE,
        }

    # ------------------------------------------------------------------ pages

    @app.get("/", response_class=HTMLResponse)
    def runs_page() -> HTMLResponse:
        return page("runs.html.j2", title="runs", runs=data.runs(), curves=data.curves())

    @app.get("/trajectories", response_class=HTMLResponse)
    def trajectories_page(request: Request) -> HTMLResponse:
        query = table_query(request)
        return page(
            "trajectories.html.j2", title="trajectories", **table_context(query, "/trajectories")
        )

    @app.get("/runs/{run_id}", response_model=None)
    def run_page(request: Request, run_id: str) -> Response:
        resolved = data.resolve_run(run_id)
        if resolved != run_id:  # a prefix: the run's own URL is the stable one
            suffix = f"?{request.url.query}" if request.url.query else ""
            return RedirectResponse(f"/runs/{quote(resolved)}{suffix}", status_code=307)
        query = table_query(request, fixed={"run": resolved})
        return page(
            "run.html.j2",
            title=f"run {resolved}",
            run=data.run(resolved),
            curves=data.curves(resolved),
            live=query.offset == 0 and query.sort == "created_at" and query.desc,
            live_cursor=data.last_rowid(query.filter()),
            **table_context(query, f"/runs/{resolved}"),
        )

    @app.get("/triage", response_class=HTMLResponse)
    def triage_page(run: str | None = None) -> HTMLResponse:
        resolved = None if run is None else data.resolve_run(run)
        return page("triage.html.j2", title="triage", f=data.failures(resolved))

    @app.get("/trajectories/{traj_id}", response_class=HTMLResponse)
    def trajectory_page(traj_id: str) -> HTMLResponse:
        view = data.trajectory(traj_id)
        return page("trajectory.html.j2", title=f"trajectory {view['id']}", t=view)

    @app.get("/groups/{group_id:path}", response_class=HTMLResponse)
    def group_page(group_id: str, estimator: str = "grpo") -> HTMLResponse:
        view = data.group(group_id, estimator)
        return page("group.html.j2", title=f"group {group_id}", g=view)

    @app.get("/diff/{a}/{b}", response_class=HTMLResponse)
    def diff_page(a: str, b: str) -> HTMLResponse:
        return page("diff.html.j2", title=f"diff {a} {b}", d=data.diff(a, b))

    # ------------------------------------------------------------------ JSON API

    @app.get("/api/runs")
    def api_runs() -> dict[str, Any]:
        return {"runs": data.runs()}

    @app.get("/api/runs/{run_id}")
    def api_run(run_id: str) -> dict[str, Any]:
        return data.run(data.resolve_run(run_id))

    @app.get("/api/runs/{run_id}/events", response_model=None)
    def api_run_events(request: Request, run_id: str) -> StreamingResponse:
        """New trajectories of a run as SSE; the table's filters (``run`` fixed) apply."""
        resolved = data.resolve_run(run_id)
        params = dict(request.query_params)
        after_text, max_s_text = params.pop("after", None), params.pop("max_s", None)
        query = parse_table_query(params, fixed={"run": resolved})
        try:
            max_s = DEFAULT_EVENTS_S if max_s_text is None else float(max_s_text)
        except ValueError:
            raise BadRequest(f"max_s: {max_s_text!r} is not a number of seconds") from None
        if not 0 < max_s <= MAX_EVENTS_S:
            raise BadRequest(f"max_s: {max_s} is not in (0, {MAX_EVENTS_S:.0f}]")
        header = request.headers.get("last-event-id")
        for name, text in (("Last-Event-ID", header), ("after", after_text)):
            if text is not None and not text.isdigit():
                raise BadRequest(f"{name}: {text!r} is not a trajectory cursor (a rowid)")
        where = query.filter()
        cursor_text = header if header is not None else after_text
        cursor = int(cursor_text) if cursor_text is not None else data.last_rowid(where)
        stream = trajectory_events(data, where, cursor, max_s, request.is_disconnected)
        return StreamingResponse(
            stream,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.get("/api/triage")
    def api_triage(run: str | None = None) -> dict[str, Any]:
        return data.failures(None if run is None else data.resolve_run(run))

    @app.get("/api/trajectories")
    def api_trajectories(request: Request) -> dict[str, Any]:
        return data.table(table_query(request))

    @app.get("/api/trajectories/{traj_id}")
    def api_trajectory(traj_id: str) -> dict[str, Any]:
        return data.trajectory(traj_id)

    @app.get("/images/{sha256}")
    def image(sha256: str) -> Response:
        part = data.image(sha256)
        # Content-addressed: the bytes behind a hash never change.
        cache = {"Cache-Control": "public, max-age=31536000, immutable"}
        return Response(part.data, media_type=part.media_type, headers=cache)

    @app.get("/api/groups/{group_id:path}")
    def api_group(group_id: str, estimator: str = "grpo") -> dict[str, Any]:
        return data.group(group_id, estimator)

    @app.get("/api/diff/{a}/{b}")
    def api_diff(a: str, b: str) -> dict[str, Any]:
        return data.diff(a, b)

    return app


def serve_viewer(
    store_path: Path,
    run_dir: Path | None,
    host: str,
    port: int,
    started: Callable[[], None] = lambda: None,
) -> None:
    """Serve the viewer of ``store_path`` in the foreground until Ctrl-C (``trajforge view``);
    ``started`` runs once the store has opened, before the server listens."""
    data = ViewerData(store_path, run_dir)
    try:
        started()
        serve_app_forever(create_app(data), host, port, graceful_s=SHUTDOWN_S)
    finally:
        data.close()
