"""Agents written with the OpenAI Agents SDK (its default Responses model and its Chat
Completions model, streamed and not) and with LangGraph, run against ``trajforge serve``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from openai import AsyncOpenAI
from serve_helpers import MODEL, assert_token_exact, recorded

from trajforge.schema import OutcomeStatus, Role

# Nothing may leave 127.0.0.1: the Agents SDK would otherwise export traces to OpenAI.
set_tracing_disabled(True)


@function_tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return json.dumps({"sum": a + b})


def _agent(base_url: str, session: str, kind: str) -> Agent:
    client = AsyncOpenAI(base_url=f"{base_url}/sessions/{session}/v1", api_key="unused")
    model = (
        OpenAIResponsesModel(model=MODEL, openai_client=client)
        if kind == "responses"
        else OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
    )
    return Agent(
        name="adder", instructions="Add numbers with the add tool.", tools=[add], model=model
    )


@pytest.mark.parametrize("kind", ["responses", "chat"])
@pytest.mark.parametrize("streamed", [False, True])
def test_openai_agents_sdk(base_url: str, store_path: Path, kind: str, streamed: bool) -> None:
    agent = _agent(base_url, "agents", kind)
    question = "What is 3 plus 4 plus 5?"
    config = RunConfig(tracing_disabled=True)

    async def run() -> str:
        if not streamed:
            return str((await Runner.run(agent, question, run_config=config)).final_output)
        result = Runner.run_streamed(agent, question, run_config=config)
        async for _ in result.stream_events():
            pass
        return str(result.final_output)

    assert asyncio.run(run()) == "The total is 12."
    (traj,) = recorded(store_path)
    assert traj.outcome.status is OutcomeStatus.OK and traj.num_turns == 3
    assert traj.messages[0].role is Role.SYSTEM and "add tool" in traj.messages[0].content
    assert [m.role for m in traj.messages[1:]] == [
        Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT
    ]  # fmt: skip
    assert_token_exact(store_path)


@tool("add")
def add_tool(a: int, b: int) -> str:
    """Add two integers."""
    return json.dumps({"sum": a + b})


# LangGraph 1.x points to langchain.agents.create_agent, a package our users may not have.
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_langgraph_react_agent(base_url: str, store_path: Path) -> None:
    llm = ChatOpenAI(model=MODEL, base_url=f"{base_url}/sessions/lg/v1", api_key="unused")
    agent = create_react_agent(llm, [add_tool])
    state = agent.invoke({"messages": [("user", "What is 10 plus 20 plus 30 plus 40?")]})
    assert state["messages"][-1].content == "The total is 100."
    (traj,) = recorded(store_path)
    assert traj.outcome.status is OutcomeStatus.OK and traj.num_turns == 4
    assert_token_exact(store_path)
