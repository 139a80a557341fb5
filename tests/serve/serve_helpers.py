"""What the gateway tests share: a scripted model that adds numbers with an ``add`` tool, the
tool itself, and the checks a recorded run must pass (``trajforge check``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.formats.tool_calls import format_tool_call
from trajforge.schema import Message, Role, Task, Trajectory
from trajforge.store import TrajectoryStore

MODEL = "scripted-agent"


def adder_reply(task: Task | None, messages: list[Message]) -> str:
    """Add the numbers of the user's question with the ``add`` tool, two at a time, then
    answer with the total: a tool loop of len(numbers) - 1 calls."""
    question = next(m.content for m in messages if m.role is Role.USER)
    numbers = [int(w) for w in question.replace("?", " ").split() if w.lstrip("-").isdigit()]
    results = [json.loads(m.content)["sum"] for m in messages if m.role is Role.TOOL]
    done = len(results)
    if done >= len(numbers) - 1:
        total = results[-1] if results else numbers[0]
        return f"The total is {total}."
    left = results[-1] if results else numbers[0]
    return format_tool_call("add", {"a": left, "b": numbers[done + 1]})


ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


def add(arguments: str) -> str:
    values = json.loads(arguments)
    return json.dumps({"sum": values["a"] + values["b"]})


def recorded(store_path: Path, **filters: Any) -> list[Trajectory]:
    with TrajectoryStore(store_path) as store:
        return store.query(run="gw", **filters)


def assert_token_exact(store_path: Path) -> None:
    result = CliRunner().invoke(app, ["check", "--store", str(store_path), "--run", "gw", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["checked"] >= 1 and report["mismatches"] == [], report


def session_trajectories(store_path: Path, session: str) -> list[Trajectory]:
    return [t for t in recorded(store_path) if t.metadata["gateway"]["session"] == session]


def seeing_server(received: list[dict[str, Any]]) -> FastAPI:
    """An OpenAI-compatible server that takes images, keeping each request body it gets."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(body: dict[str, Any]) -> dict[str, Any]:
        received.append(body)
        message = {"role": "assistant", "content": "A grey square."}
        return {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": message}]}  # fmt: skip

    return app
