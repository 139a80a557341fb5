"""A calculator agent written with the OpenAI Agents SDK, trained by RL through the gateway.

The SDK is the harness: its ``Runner`` runs the loop (model call, tool call, model call...) and
nothing here imports trajforge. The RL stage (or ``trajforge collect``) runs this program once
per task with OPENAI_BASE_URL pointing at a recording session over the model being trained and
passes the task as JSON on stdin; the gateway records the SDK's Chat Completions calls as one
token-exact trajectory and the environment's verifier scores its last reply. The system prompt,
the tool's schema and the tool itself are those of ``examples/agent_rl/agent.py``, the
``calculator`` environment's own, so SFT on its demonstrations carries over.
"""

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    MaxTurnsExceeded,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    Runner,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent_rl"))
from agent import CALCULATOR, SYSTEM, calculator

# As many model calls as examples/agent_rl/agent.py makes at most.
MAX_TURNS = 4


async def _invoke(_context: RunContextWrapper[Any], arguments: str) -> str:
    return calculator(arguments)


# The schema is given, not derived by @function_tool from a signature: a derived one carries
# pydantic's "title" fields, which would change the prompt the demonstrations were trained on.
TOOL = FunctionTool(
    name=CALCULATOR["function"]["name"],
    description=CALCULATOR["function"]["description"],
    params_json_schema=CALCULATOR["function"]["parameters"],
    on_invoke_tool=_invoke,
    strict_json_schema=False,
)


def build_agent() -> Agent[Any]:
    """The agent on the gateway's Chat Completions route, sampling at the temperature the run
    is told (RL trains the policy tempered by it)."""
    model = OpenAIChatCompletionsModel(
        model=os.environ.get("TRAJFORGE_MODEL", "embedded"), openai_client=AsyncOpenAI()
    )
    settings = ModelSettings(
        temperature=float(os.environ.get("TRAJFORGE_TEMPERATURE", "1")), max_tokens=64
    )
    return Agent(
        name="calculator", instructions=SYSTEM, tools=[TOOL], model=model, model_settings=settings
    )


async def main() -> None:
    task = json.loads(sys.stdin.read())
    # The SDK would upload traces to OpenAI: nothing leaves for anywhere but the gateway.
    set_tracing_disabled(True)
    try:
        result = await Runner.run(build_agent(), task["prompt"], max_turns=MAX_TURNS)
    except MaxTurnsExceeded:
        # A run out of turns is an unanswered task, for the verifier to score, not a crash.
        return
    print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
