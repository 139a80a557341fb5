"""time: convert a clock time between timezones with the ``convert_time`` tool of an MCP server.

The tool comes from ``mcp-server-time`` (the reference MCP time server), run over stdio as one
server shared by the episodes of a process. Only timezones without daylight saving time are
used, so every answer is the same on every day of the year. The expert makes one
``convert_time`` call, then answers ``The answer is HH:MM.``
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from trajforge.envs.builtin.plan import accepted_results
from trajforge.envs.mcp import MCPEnv, MCPServerSpec, Scope, ToolSelection
from trajforge.envs.taskset import TRAIN, generate_unique
from trajforge.formats import format_tool_call
from trajforge.schema import Evidence, Message, Task

NAME = "time"
DESCRIPTION = "Convert clock times between timezones; convert_time from the MCP time server."
SYSTEM_PROMPT = "Use the convert_time tool to convert the time, then reply: The answer is HH:MM."
# City -> (IANA timezone, UTC offset in minutes); none of these zones observes DST.
CITIES: dict[str, tuple[str, int]] = {
    "Tokyo": ("Asia/Tokyo", 540),
    "Seoul": ("Asia/Seoul", 540),
    "Shanghai": ("Asia/Shanghai", 480),
    "Singapore": ("Asia/Singapore", 480),
    "Jakarta": ("Asia/Jakarta", 420),
    "Kolkata": ("Asia/Kolkata", 330),
    "Kathmandu": ("Asia/Kathmandu", 345),
    "Karachi": ("Asia/Karachi", 300),
    "Dubai": ("Asia/Dubai", 240),
    "Nairobi": ("Africa/Nairobi", 180),
    "Lagos": ("Africa/Lagos", 60),
    "Reykjavik": ("Atlantic/Reykjavik", 0),
    "Buenos Aires": ("America/Argentina/Buenos_Aires", -180),
    "Lima": ("America/Lima", -300),
    "Bogota": ("America/Bogota", -300),
    "Phoenix": ("America/Phoenix", -420),
    "Honolulu": ("Pacific/Honolulu", -600),
}
SERVER = MCPServerSpec(
    name="time",
    command="python",
    # A fixed local timezone keeps the tool descriptions (part of the prompt) the same everywhere.
    args=["-m", "mcp_server_time", "--local-timezone", "UTC"],
    scope=Scope.SHARED,
    tools=ToolSelection(include=["convert_time"]),
)
_CLOCK = re.compile(r"\b([01]?\d|2[0-3]):([0-5]\d)\b")


def _make_one(rng: random.Random) -> Task:
    source, target = rng.sample(sorted(CITIES), 2)
    hour, minute = rng.randint(0, 23), rng.choice((0, 10, 15, 20, 30, 40, 45, 50))
    time = f"{hour:02d}:{minute:02d}"
    shifted = (hour * 60 + minute + CITIES[target][1] - CITIES[source][1]) % (24 * 60)
    answer = f"{shifted // 60:02d}:{shifted % 60:02d}"
    prompt = f"It is {time} in {source}. What time is it in {target}? Answer in HH:MM (24-hour)."
    call = {
        "source_timezone": CITIES[source][0],
        "time": time,
        "target_timezone": CITIES[target][0],
    }
    return Task(id="draft", prompt=prompt, answer=answer, data={"call": call})


def generate_tasks(n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
    """``n`` distinct conversions; train and test never share one."""
    return generate_unique(NAME, _make_one, n, seed, split)


def verify(evidence: Evidence) -> float:
    """1.0 when the last HH:MM in the final reply is the gold time."""
    found = _CLOCK.findall(evidence.answer or "")
    if not found or evidence.task.answer is None:
        return 0.0
    hour, minute = found[-1]
    return 1.0 if f"{int(hour):02d}:{minute}" == evidence.task.answer else 0.0


def expert(task: Task, messages: list[Message]) -> str | None:
    """One ``convert_time`` call, then the answer read from its result."""
    results = accepted_results(messages)
    if not results:
        return format_tool_call("convert_time", task.data["call"])
    try:
        converted = json.loads(results[-1].text)["target"]["datetime"]
    except (ValueError, KeyError, TypeError):
        return f"The answer is {task.answer}."
    return f"The answer is {converted[11:16]}."


def make_env(**kwargs: Any) -> MCPEnv:
    options: dict[str, Any] = {"max_turns": 4, "tool_timeout": 10.0, "system_prompt": SYSTEM_PROMPT}
    options.update(kwargs)
    return MCPEnv(
        [SERVER], verifier=verify, name=NAME, description=DESCRIPTION, expert=expert, **options
    )
