"""A small OTLP/HTTP receiver (``trajforge otel-receive``): agents instrumented with
OpenTelemetry export their GenAI spans and log events here, and each trace becomes trajectories
in the store once it has been quiet for a while (or when the receiver stops).

``POST /v1/traces`` and ``POST /v1/logs`` take protobuf (what the OTLP/HTTP exporters send) or
JSON. A trace whose chat spans carry no message content is reported and skipped, never stored
half-empty. The receiver sits beside the conversion it serves (``otel``); it loads FastAPI and
the OTLP protobuf classes, so only ``trajforge otel-receive`` imports it, and it writes to
whatever store it is handed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from fastapi import FastAPI, Request, Response
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from trajforge.errors import DataError
from trajforge.formats.otel import otlp_id, spans_of, trajectories_from_spans
from trajforge.schema import Trajectory

PROTOBUF = "application/x-protobuf"


class TrajectorySink(Protocol):
    """Where received trajectories go (a ``TrajectoryStore``)."""

    def add_many(self, trajs: list[Trajectory], *, skip_existing: bool = False) -> int: ...


def _trace_ids(request: dict[str, Any]) -> set[str]:
    ids = set()
    for resource in request.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            ids |= {otlp_id(s.get("traceId", "")) for s in scope.get("spans", [])}
    for resource in request.get("resourceLogs", []):
        for scope in resource.get("scopeLogs", []):
            ids |= {otlp_id(r.get("traceId", "")) for r in scope.get("logRecords", [])}
    return ids - {""}


class TraceCollector:
    """Export requests by trace, turned into trajectories when their trace goes quiet.

    Args:
        store: where trajectories go (one already there is skipped).
        run_id: the run they belong to.
        idle_s: seconds without new data after which a trace is complete.
        report: called with one line per trace stored or refused.
    """

    def __init__(
        self,
        store: TrajectorySink,
        run_id: str,
        idle_s: float,
        report: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.store, self.run_id, self.idle_s, self.report = store, run_id, idle_s, report
        self._requests: list[tuple[set[str], dict[str, Any]]] = []
        self._last_seen: dict[str, float] = {}
        self._lock = threading.Lock()
        self.stored = 0
        self.refused = 0

    def add(self, request: dict[str, Any]) -> None:
        traces = _trace_ids(request)
        with self._lock:
            self._requests.append((traces, request))
            now = time.monotonic()
            for trace in traces:
                self._last_seen[trace] = now

    def flush(self, *, everything: bool = False) -> int:
        """Store the traces quiet for ``idle_s`` (all of them with ``everything``); how many
        trajectories were stored."""
        with self._lock:
            now = time.monotonic()
            ready = {t for t, seen in self._last_seen.items()
                     if everything or now - seen >= self.idle_s}  # fmt: skip
            if not ready:
                return 0
            requests = [r for traces, r in self._requests if traces & ready]
            self._requests = [(t, r) for t, r in self._requests if t - ready]
            for trace in ready:
                del self._last_seen[trace]
        stored = 0
        spans = [s for s in spans_of(requests) if s.trace_id in ready]
        for trace in sorted(ready):
            try:
                found = trajectories_from_spans(
                    [s for s in spans if s.trace_id == trace], self.run_id
                )
            except DataError as exc:
                self.refused += 1
                self.report(f"refused: {exc}")
                continue
            stored += self.store.add_many(found, skip_existing=True)
            if found:
                self.report(f"stored {len(found)} trajectories of trace {trace}")
        self.stored += stored
        return stored


def receiver_app(collector: TraceCollector) -> FastAPI:
    """The OTLP/HTTP endpoints feeding ``collector``."""
    app = FastAPI(title="trajforge OTLP receiver", docs_url=None, redoc_url=None)

    async def receive(request: Request, message: type[Any], reply: type[Any]) -> Response:
        body = await request.body()
        try:
            if request.headers.get("content-type", "").startswith(PROTOBUF):
                decoded = message()
                decoded.ParseFromString(body)
                collector.add(MessageToDict(decoded))
                return Response(reply().SerializeToString(), media_type=PROTOBUF)
            collector.add(json.loads(body))
        except (DecodeError, ValueError) as exc:
            return Response(f"not an OTLP export request: {exc}", status_code=400)
        return Response("{}", media_type="application/json")

    @app.post("/v1/traces")
    async def _traces(request: Request) -> Response:
        return await receive(request, ExportTraceServiceRequest, ExportTraceServiceResponse)

    @app.post("/v1/logs")
    async def _logs(request: Request) -> Response:
        return await receive(request, ExportLogsServiceRequest, ExportLogsServiceResponse)

    return app
