"""``trajforge serve`` (an OpenAI-compatible gateway that records every call as trajectories) and
``trajforge collect`` (run an agent program per task against it)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from trajforge.cli import rollout_options as opts
from trajforge.cli.common import (
    JsonOption,
    StoreOption,
    console,
    err_console,
    print_json,
    resolve_store_path,
)
from trajforge.cli.failures import finish, stored_failures
from trajforge.cli.preflight import check_reachable, claim_port
from trajforge.envs.registry import get_env
from trajforge.envs.taskset import TaskSet
from trajforge.errors import ConfigError
from trajforge.policy.naming import check_policy_name
from trajforge.precision import Precision
from trajforge.rollout import PolicyRef, new_run_id
from trajforge.schema import OutcomeStatus, Task
from trajforge.serve.recorder import SERVER_SESSIONS
from trajforge.serve.upstream import open_gateway
from trajforge.store import TrajectoryStore

if TYPE_CHECKING:
    from trajforge.serve.collect import AgentRun

ServeModelOption = Annotated[
    str,
    typer.Option(
        "--model",
        help="The model behind the gateway: embedded, tiny, a model folder, or another server "
        "as openai:<base_url>#<model> (forwarded, its token ids recorded).",
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
    run: opts.RunOption = None,
    precision: opts.PrecisionOption = Precision.AUTO,
    batch_size: opts.BatchSizeOption = 16,
    store: StoreOption = None,
) -> None:
    """Serve MODEL as an OpenAI-compatible API (/v1/chat/completions, /v1/responses) and record
    every call: a session at /sessions/ID/v1 becomes token-exact trajectories in the store."""
    from trajforge.serve.server import serve_forever  # lazy: uvicorn and fastapi take 0.4 s

    port = claim_port(host, port)
    _check_model(model)
    ref = PolicyRef(name=model, precision=precision, batch_size=batch_size)
    run_id = run or new_run_id()
    path = resolve_store_path(store)
    with TrajectoryStore(path) as db:
        gateway, runs_on = open_gateway(ref, db, run_id)
        gateway.recorder.keep_sessions = SERVER_SESSIONS
        db.set_run(run_id, {"kind": "gateway", "model": model, "runs_on": runs_on})
        err_console.print(
            f"serving {model} ({runs_on}) at http://{host}:{port}/v1 — a session per agent "
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


def _check_model(model: str) -> None:
    """Refuse a model that names nothing, or whose server does not answer, before the store."""
    try:
        check_policy_name(model)
    except ConfigError as exc:
        raise ConfigError(f"--model: {exc}") from None
    check_reachable(model, "--model")


def _tasks(
    env: str | None, tasks_file: Path | None, count: int, split: str, seed: int
) -> list[Task]:
    if (env is None) == (tasks_file is None):
        raise ConfigError("collect: give --env or --tasks-file FILE.jsonl (one of them)")
    if tasks_file is not None:
        return list(TaskSet.from_jsonl(tasks_file, env=env))
    assert env is not None
    return get_env(env).tasks(count, seed=seed, split=split)


def collect(
    agent: Annotated[
        str,
        typer.Option("--agent", help="Command that runs the agent once, e.g. 'python agent.py'."),
    ],
    env: Annotated[
        str | None, typer.Option("--env", help="Environment whose tasks (and verifier) to use.")
    ] = None,
    tasks_file: Annotated[
        Path | None,
        typer.Option("--tasks-file", help="Tasks as JSONL (one Task per line) instead of --env's."),
    ] = None,
    tasks: Annotated[
        int, typer.Option("--tasks", min=1, help="How many of --env's tasks to run.")
    ] = 8,
    n: Annotated[int, typer.Option("--n", min=1, help="Runs per task.")] = 1,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, help="Agent programs running at once.")
    ] = 8,
    timeout: Annotated[
        float,
        typer.Option("--timeout", min=0.1, help="Seconds one run may take before it is killed."),
    ] = 300.0,
    model: ServeModelOption = "embedded",
    split: Annotated[
        str, typer.Option("--split", help="Split of --env's tasks: train or test.")
    ] = "train",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sample of --env's tasks.")] = 0,
    run: opts.RunOption = None,
    precision: opts.PrecisionOption = Precision.AUTO,
    batch_size: opts.BatchSizeOption = 16,
    ray: opts.RayOption = False,
    ray_address: opts.RayAddressOption = None,
    as_json: JsonOption = False,
    store: StoreOption = None,
) -> None:
    """Run an agent program once per task x --n against its own gateway session, recording its
    model calls as trajectories; every run ends ok, error or timeout, with its reward. With
    --ray the programs run as Ray tasks (the gateway and the store stay here)."""
    # lazy: uvicorn and fastapi take 0.4 s
    from trajforge.serve.collect import agents_on_ray, collect_runs

    on_ray = opts.ray_options({"ray": ray, "ray_address": ray_address})
    _check_model(model)
    task_list = _tasks(env, tasks_file, tasks, split, seed)
    ref = PolicyRef(name=model, precision=precision, batch_size=batch_size)
    run_id = run or new_run_id()
    path = resolve_store_path(store)
    with TrajectoryStore(path) as db, ExitStack() as stack:
        where: dict[str, Any] = {}
        if on_ray is not None:
            launcher = stack.enter_context(agents_on_ray(on_ray))
            where = {"launch": launcher, "host": launcher.host}
        db.set_run(run_id, {"kind": "collect", "agent": agent, "model": model, "env": env})
        gateway, _ = open_gateway(ref, db, run_id, env=env)
        try:
            with _progress(len(task_list) * n, not as_json) as on_done:
                runs = collect_runs(
                    gateway, agent, task_list, n=n, concurrency=concurrency, timeout_s=timeout,
                    env=env, on_done=on_done, **where,
                )  # fmt: skip
        finally:
            asyncio.run(gateway.close())
        failures = stored_failures(db, run_id)
    summary = _summary(runs, run_id)
    if as_json:
        print_json(summary)
        finish(failures, len(runs), "agent runs")
        return
    table = Table(title=f"collect {run_id}")
    table.add_column("runs", justify="right")
    for status in OutcomeStatus:
        table.add_column(status.value, justify="right")
    table.add_column("mean reward", justify="right")
    reward = summary["reward_mean"]
    table.add_row(
        str(summary["runs"]),
        *(str(summary["status"][s.value]) for s in OutcomeStatus),
        "-" if reward is None else f"{reward:.3f}",
    )
    console.print(table)
    console.print(f"stored in {path} as run {run_id}")
    finish(failures, len(runs), "agent runs")


@contextmanager
def _progress(total: int, show: bool) -> Iterator[Callable[[AgentRun], None]]:
    """A Rich bar of finished agent runs with their statuses; yields the per-run callback."""
    columns = (TextColumn("collect"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[status]}"), TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=err_console, disable=not show) as progress:
        bar = progress.add_task("collect", total=total, status="")
        counts: dict[str, int] = {}

        def done(run: AgentRun) -> None:
            counts[run.status.value] = counts.get(run.status.value, 0) + 1
            text = " ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            progress.update(bar, advance=1, status=text)

        yield done


def _summary(runs: list[AgentRun], run_id: str) -> dict[str, Any]:
    rewards = [r.reward for r in runs if r.reward is not None]
    return {
        "run_id": run_id,
        "runs": len(runs),
        "status": {s.value: sum(r.status is s for r in runs) for s in OutcomeStatus},
        "rewarded": len(rewards),
        "reward_mean": sum(rewards) / len(rewards) if rewards else None,
    }


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
    from trajforge.serve.otel_receiver import TraceCollector, receiver_app
    from trajforge.serve.server import serve_app_forever  # lazy: as above

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
    app.command("collect")(collect)
    app.command("otel-receive")(otel_receive)
