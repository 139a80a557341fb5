"""OpenTelemetry GenAI telemetry from a real instrumented agent (opentelemetry-instrumentation-
openai-v2 around the openai SDK) received over OTLP/HTTP and stored as trajectories; OTLP JSON
files in both attribute conventions; trajectories written back as spans."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from serve_helpers import MODEL

from trajforge.errors import DataError
from trajforge.formats.otel_receiver import TraceCollector, receiver_app
from trajforge.formats.records import FORMATS, load_records, write_records
from trajforge.schema import Role
from trajforge.serve.server import serving_app
from trajforge.store import TrajectoryStore

AGENT = Path(__file__).parent / "otel_agent.py"


def _run_agent(model_url: str, receiver_url: str, capture: str) -> str:
    env = {**os.environ, "OPENAI_BASE_URL": f"{model_url}/v1", "OPENAI_API_KEY": "unused",
           "MODEL": MODEL, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver_url,
           "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": capture}  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(AGENT)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_an_instrumented_agent_becomes_one_trajectory(base_url: str, tmp_path: Path) -> None:
    with TrajectoryStore(tmp_path / "otel.db") as store:
        collector = TraceCollector(store, "otel", idle_s=60)
        with serving_app(receiver_app(collector)) as receiver:
            assert _run_agent(base_url, receiver, "true") == "The total is 15."
        assert collector.flush(everything=True) == 1
        (traj,) = store.query(run="otel")
    roles = [m.role for m in traj.messages]
    assert roles == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT, Role.TOOL,
                     Role.ASSISTANT]  # fmt: skip
    assert traj.messages[2].tool_calls[0].arguments == {"a": 4, "b": 5}
    assert traj.messages[3].tool_call_id == traj.messages[2].tool_calls[0].id
    assert traj.messages[-1].content == "The total is 15." and traj.model == MODEL
    assert traj.usage.turns == 3 and traj.usage.prompt_tokens > 0
    assert traj.metadata["otel"]["chat_spans"] == 3


def test_a_trace_without_content_is_refused_with_the_fix(base_url: str, tmp_path: Path) -> None:
    lines: list[str] = []
    with TrajectoryStore(tmp_path / "otel.db") as store:
        collector = TraceCollector(store, "otel", idle_s=60, report=lines.append)
        with serving_app(receiver_app(collector)) as receiver:
            _run_agent(base_url, receiver, "false")
        assert collector.flush(everything=True) == 0 and collector.refused == 1
        assert store.count() == 0
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true" in lines[0]


def _attr(key: str, value: object) -> dict[str, object]:
    kind = "intValue" if isinstance(value, int) else "stringValue"
    return {"key": key, "value": {kind: value}}


LEGACY_SPAN = {
    "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
    "name": "chat gpt-x", "startTimeUnixNano": "1", "endTimeUnixNano": "2",
    "attributes": [
        _attr("gen_ai.operation.name", "chat"), _attr("gen_ai.request.model", "gpt-x"),
        _attr("gen_ai.prompt.0.role", "user"), _attr("gen_ai.prompt.0.content", "Weather?"),
        _attr("gen_ai.completion.0.role", "assistant"),
        _attr("gen_ai.completion.0.tool_calls.0.id", "t1"),
        _attr("gen_ai.completion.0.tool_calls.0.name", "weather"),
        _attr("gen_ai.completion.0.tool_calls.0.arguments", '{"city": "Oslo"}'),
        _attr("gen_ai.usage.input_tokens", 7),
    ],
}  # fmt: skip


def test_older_prompt_attributes_and_a_round_trip_through_spans(tmp_path: Path) -> None:
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [LEGACY_SPAN]}]}]}))
    (traj,) = load_records(path, FORMATS.get("otel"))
    assert [m.role for m in traj.messages] == [Role.USER, Role.ASSISTANT]
    assert traj.messages[1].tool_calls[0].arguments == {"city": "Oslo"} and traj.model == "gpt-x"
    out = tmp_path / "spans.jsonl"
    write_records(out, [traj], FORMATS.get("otel"))
    (back,) = load_records(out, FORMATS.get("otel"))
    assert [(m.role, m.content, m.tool_calls) for m in back.messages] == [
        (m.role, m.content, m.tool_calls) for m in traj.messages
    ]


def test_a_file_that_is_not_otlp_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"spans": []}')
    with pytest.raises(DataError, match="not OTLP JSON"):
        load_records(path, FORMATS.get("otel"))


def test_the_otel_receive_command_stores_quiet_traces(base_url: str, tmp_path: Path) -> None:
    store, port = tmp_path / "received.db", _free_port()
    argv = [str(Path(sys.executable).parent / "trajforge"), "otel-receive", "--port", str(port),
            "--idle", "0.5", "--run", "rx", "--store", str(store)]  # fmt: skip
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        receiver = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while not _listening(port):
            assert process.poll() is None and time.monotonic() < deadline, "no receiver"
            time.sleep(0.1)
        _run_agent(base_url, receiver, "true")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if store.exists():
                with TrajectoryStore(store) as db:
                    if db.count(run="rx") == 1:
                        break
            time.sleep(0.2)
        else:
            raise AssertionError("the quiet trace was not stored")
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "stored 1 trajectories (0 traces refused)" in err


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
