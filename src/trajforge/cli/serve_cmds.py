"""``trajforge serve`` (an OpenAI-compatible gateway that records every call as trajectories) and
``trajforge otel-receive`` (an agent's OpenTelemetry GenAI telemetry stored as trajectories)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Annotated

import typer

from trajforge.cli import rollout_options as opts
from trajforge.cli.common import (
    StoreOption,
    err_console,
    resolve_store_path,
)
from trajforge.cli.preflight import check_reachable, claim_port
from trajforge.errors import ConfigError
from trajforge.policy import check_policy_name
from trajforge.precision import Precision
from trajforge.rollout import PolicyRef, new_run_id
from trajforge.serve import SERVER_SESSIONS, open_gateway
from trajforge.store import TrajectoryStore

ServeModelOption = Annotated[
    str,
    typer.Option(
        "--model",
        help="The model behind the gateway: embedded, tiny, a model folder, or another server "
        "as openai:<base_url>#<model> (forwarded, its token ids recorded).",
    ),
]
ServedNameOption = Annotated[
    str | None,
    typer.Option(
        "--served-model-name",
        help="The model name clients ask for (as vLLM's flag); any other name gets a 404. "
        "Default: the --model value.",
    ),
]
LoraModulesOption = Annotated[
    list[str] | None,
    typer.Option(
        "--lora-modules",
        help="A LoRA adapter to serve as NAME=PATH (repeatable; vLLM's flag). Calls naming "
        "NAME, or BASE:NAME, decode with it, in the same batches as the base model and every "
        "other adapter (docs/gateway.md, Adapters).",
    ),
]
HostOption = Annotated[str, typer.Option("--host", help="Address to listen on.")]
PortOption = Annotated[
    int, typer.Option("--port", min=0, max=65535, help="Port (0: any free one).")
]


def serve(
    model: ServeModelOption = "embedded",
    host: HostOption = "127.0.0.1",
    port: PortOption = 8000,
    served_model_name: ServedNameOption = None,
    lora_modules: LoraModulesOption = None,
    run: opts.RunOption = None,
    precision: opts.PrecisionOption = Precision.AUTO,
    batch_size: opts.BatchSizeOption = 16,
    store: StoreOption = None,
    tinker: Annotated[
        bool,
        typer.Option("--tinker", help="Serve the Tinker training API instead (docs/tinker.md)."),
    ] = False,
    tinker_dir: Annotated[
        Path, typer.Option("--tinker-dir", help="Tinker checkpoints, tokenizers and metrics.")
    ] = Path("runs/tinker"),
    tinker_model: Annotated[
        list[Path] | None,
        typer.Option("--tinker-model", help="A model folder the Tinker API also offers."),
    ] = None,
) -> None:
    """Serve MODEL as an OpenAI-compatible API (/v1/chat/completions, /v1/responses) and record
    every call: a session at /sessions/ID/v1 becomes token-exact trajectories in the store."""
    if tinker:
        # lazy: the Tinker server loads torch, the trainer and the tinker SDK's protobufs
        from trajforge.tinker import serve_tinker

        port = claim_port(host, port)
        serve_tinker(
            host, port, tinker_dir, tinker_model or [], resolve_store_path(store), err_console
        )
        return
    from trajforge.serve import load_adapters, serve_forever  # lazy: uvicorn, fastapi 0.4 s

    port = claim_port(host, port)
    check_model(model)
    adapters = [parse_lora_module(m) for m in lora_modules or []]
    ref = PolicyRef(name=model, precision=precision, batch_size=batch_size)
    run_id = run or new_run_id()
    path = resolve_store_path(store)
    with TrajectoryStore(path) as db:
        gateway, runs_on = open_gateway(ref, db, run_id, served_name=served_model_name)
        gateway.recorder.hold_sessions(SERVER_SESSIONS)
        load_adapters(gateway, adapters, "--lora-modules")
        meta = {"kind": "gateway", "model": model, "runs_on": runs_on}
        if served_model_name:
            meta["served_model_name"] = served_model_name
        db.set_run(run_id, meta)
        served_as = f" as {served_model_name}" if served_model_name else ""
        err_console.print(
            f"serving {model}{served_as} ({runs_on}) at http://{host}:{port}/v1 — a session per agent "
            f"run at /sessions/ID/v1; recording run {run_id} into {path}; Ctrl-C stops",
            soft_wrap=True,
        )
        try:
            serve_forever(gateway, host, port)
        finally:
            asyncio.run(gateway.close())
            count = db.count(run=run_id)
            err_console.print(
                f"stored {count} trajectories of run {run_id} in {path}", soft_wrap=True
            )


def parse_lora_module(spec: str) -> tuple[str, str]:
    """``NAME=PATH`` of ``--lora-modules`` as ``(NAME, PATH)``."""
    name, equals, path = spec.partition("=")
    if not (equals and name.strip() and path.strip()):
        raise ConfigError(f"--lora-modules: expected NAME=PATH, got {spec!r}")
    return name.strip(), path.strip()


def check_model(model: str) -> None:
    """Refuse a model that names nothing, or whose server does not answer, before the store
    (``serve`` and ``collect``)."""
    try:
        check_policy_name(model)
    except ConfigError as exc:
        raise ConfigError(f"--model: {exc}") from None
    check_reachable(model, "--model")


def otel_receive(
    host: HostOption = "127.0.0.1",
    port: PortOption = 4318,
    idle: Annotated[
        float,
        typer.Option("--idle", min=0.1, help="Seconds of quiet after which a trace is stored."),
    ] = 5.0,
    run: opts.RunOption = None,
    store: StoreOption = None,
) -> None:
    """Receive OpenTelemetry GenAI telemetry over OTLP/HTTP (point an agent's
    OTEL_EXPORTER_OTLP_ENDPOINT here) and store each trace's conversations as trajectories."""
    # lazy: the receiver loads uvicorn, fastapi and the OTLP protobuf classes (0.5 s)
    from trajforge.formats import TraceCollector, receiver_app
    from trajforge.serve import serve_app_forever  # lazy: as above

    port = claim_port(host, port)
    run_id = run or new_run_id()
    path = resolve_store_path(store)
    with TrajectoryStore(path) as db:
        db.set_run(run_id, {"kind": "otel"})
        collector = TraceCollector(db, run_id, idle, report=err_console.print)
        stop = threading.Event()

        def flush_quiet_traces() -> None:
            while not stop.wait(0.5):
                collector.flush()

        flusher = threading.Thread(target=flush_quiet_traces, daemon=True)
        flusher.start()
        err_console.print(
            f"receiving OTLP/HTTP at http://{host}:{port} (/v1/traces, /v1/logs) into run "
            f"{run_id} of {path}; Ctrl-C stops",
            soft_wrap=True,
        )
        try:
            serve_app_forever(receiver_app(collector), host, port)
        finally:
            stop.set()
            flusher.join()
            collector.flush(everything=True)
            err_console.print(
                f"stored {collector.stored} trajectories ({collector.refused} traces refused)"
            )


def register(app: typer.Typer) -> None:
    """Add the gateway commands to ``app``."""
    app.command("serve")(serve)
    app.command("otel-receive")(otel_receive)
