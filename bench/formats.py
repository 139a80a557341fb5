"""Importing OpenAI-format chat records, as ``trajforge import --format openai`` does: parse and
validate every record of a JSONL file, then store them all in one transaction.

The baseline is trajforge's own JSONL of the same trajectories, imported the same way in the
same run (the format it reads fastest: pydantic straight from bytes). Records are synthetic tool
conversations (a system prompt, a question, two tool calls with results, an answer: 7 messages).

    .venv/bin/python bench/formats.py             # 100,000 records
    .venv/bin/python bench/formats.py --records 20000

Prints one JSON line; ``ratio`` is the OpenAI import rate over the 5,000 trajectories/s target,
``vs_native`` the OpenAI rate over trajforge's own format.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from trajforge.formats.records import FORMATS, load_records, paused_gc, write_records
from trajforge.schema import FunctionSpec, Message, Role, Task, ToolCall, ToolSpec, Trajectory
from trajforge.store import TrajectoryStore

TARGET_PER_S = 5000


def _trajectory(k: int) -> Trajectory:
    calls = [ToolCall(id=f"call_{t}_0", name="calculator", arguments={"expression": f"{k}*{t}+1"})
             for t in range(2)]  # fmt: skip
    messages = [
        Message(role=Role.SYSTEM, content="You are a careful assistant with a calculator."),
        Message(role=Role.USER, content=f"Question {k}: what is {k} times 2, plus 1?"),
    ]
    for call in calls:
        messages.append(Message(role=Role.ASSISTANT, content="", tool_calls=[call]))
        messages.append(Message(role=Role.TOOL, content=str(k * 2 + 1), tool_call_id=call.id))
    messages.append(Message(role=Role.ASSISTANT, content=f"The answer is {k * 2 + 1}."))
    tool = ToolSpec(function=FunctionSpec(name="calculator", description="Evaluate arithmetic."))
    return Trajectory(
        task=Task(id=f"t{k}", prompt=messages[1].content), tools=[tool], messages=messages
    )


def _import(path: Path, fmt: str, db_path: Path) -> float:
    start = time.perf_counter()
    with paused_gc(), TrajectoryStore(db_path) as store:  # as `trajforge import` does
        store.add_many(load_records(path, FORMATS.get(fmt)))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trajectories = [_trajectory(k) for k in range(args.records)]
        write_records(folder / "chats.jsonl", trajectories, FORMATS.get("openai"))
        write_records(folder / "native.jsonl", trajectories, FORMATS.get("trajforge"))
        del trajectories
        native_s = _import(folder / "native.jsonl", "trajforge", folder / "native.db")
        openai_s = _import(folder / "chats.jsonl", "openai", folder / "openai.db")
        size_mb = (folder / "chats.jsonl").stat().st_size / 2**20
    openai_rate, native_rate = args.records / openai_s, args.records / native_s
    print(json.dumps({
        "bench": "formats",
        "records": args.records,
        "file_mb": round(size_mb, 1),
        "openai_per_s": round(openai_rate),
        "native_per_s": round(native_rate),
        "vs_native": round(openai_rate / native_rate, 3),
        "target_per_s": TARGET_PER_S,
        "ratio": round(openai_rate / TARGET_PER_S, 3),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
