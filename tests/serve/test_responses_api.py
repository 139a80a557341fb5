"""The Responses API as Codex CLI and the OpenAI SDK speak it, through the official ``openai``
client against ``trajforge serve``: ``previous_response_id``, namespaced tools, tools the
gateway cannot serve, reasoning items passed back, and the API's own errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from fastapi import FastAPI
from openai import OpenAI
from serve_helpers import ADD_TOOL, add, assert_token_exact, recorded

from trajforge.formats import messages_from_responses
from trajforge.formats.tool_calls import format_tool_call
from trajforge.policy import FinishReason
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.rollout import PolicyRef
from trajforge.schema import Message, OutcomeStatus, Role, Task, ToolCall
from trajforge.serve.gateway import Choice, Gateway
from trajforge.serve.responses_reply import output_items
from trajforge.serve.server import serving, serving_app
from trajforge.serve.upstream import open_gateway
from trajforge.store import TrajectoryStore

MODEL = "scripted-agent"
MATH = {
    "type": "namespace",
    "name": "math",
    "description": "Arithmetic.",
    "tools": [{"type": "function", **ADD_TOOL["function"]}],
}
# What Codex CLI sends beside its own tools: hosted tools no local model serves.
HOSTED = [{"type": "web_search", "external_web_access": False}, {"type": "file_search"}]


def namespaced_adder(task: Task | None, messages: list[Message]) -> str:
    """Add 2 and 3 with ``math``'s ``add`` (offered as ``math__add``), then say the sum."""
    results = [json.loads(m.content)["sum"] for m in messages if m.role is Role.TOOL]
    if results:
        return f"The total is {results[-1]}."
    return format_tool_call("math__add", {"a": 2, "b": 3})


@pytest.fixture
def namespaced(store_path: Path) -> Iterator[OpenAI]:
    store = TrajectoryStore(store_path)
    policy = ScriptedPolicy(namespaced_adder, load_tokenizer(), name=MODEL)
    with serving(Gateway(policy, store, run_id="gw")) as url:
        yield OpenAI(base_url=f"{url}/sessions/ns/v1", api_key="unused", max_retries=0)
    store.close()


@pytest.mark.parametrize("stream", [False, True])
def test_a_namespaced_tool_is_called_by_its_namespace_and_hosted_tools_are_left_out(
    namespaced: OpenAI, store_path: Path, stream: bool
) -> None:
    asked: dict[str, Any] = {"model": MODEL, "tools": [MATH, *HOSTED], "store": False}
    items: list[Any] = [{"role": "user", "content": "What is 2 plus 3?"}]

    def respond() -> Any:
        if not stream:
            return namespaced.responses.create(input=items, **asked)
        with namespaced.responses.stream(input=items, **asked) as events:
            return events.get_final_response()

    first = respond()
    (call,) = first.output
    assert call.type == "function_call" and call.name == "add"
    assert call.model_dump()["namespace"] == "math"
    items += [item.model_dump(exclude_none=True) for item in first.output]
    items.append({"type": "function_call_output", "call_id": call.call_id,
                  "output": add(call.arguments)})  # fmt: skip
    assert respond().output_text == "The total is 5."
    (traj,) = recorded(store_path)
    assert [t.function.name for t in traj.tools] == ["math__add"]
    assert traj.messages[1].tool_calls[0].name == "math__add" and traj.num_turns == 2
    assert_token_exact(store_path)


def test_previous_response_id_continues_the_kept_conversation(
    tiny: OpenAI, store_path: Path
) -> None:
    # Instructions are not carried over from the previous response: each call sends them.
    asked: dict[str, Any] = {"model": "tiny", "max_output_tokens": 8, "instructions": "Be brief."}
    first = tiny.responses.create(input="Name a colour.", **asked)
    assert first.store is True and first.output_text
    with tiny.responses.stream(input="And another?", previous_response_id=first.id,
                               **asked) as events:  # fmt: skip
        streamed = list(events)
    kinds = [event.type for event in streamed]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    # The tiny model seldom ends a reply within 8 tokens: the response is cut, not completed.
    assert kinds[-1] in ("response.completed", "response.incomplete")
    second = streamed[-1].response
    assert second.previous_response_id == first.id
    third = tiny.responses.create(input="One more.", previous_response_id=second.id,
                                  store=False, **asked)  # fmt: skip
    (traj,) = recorded(store_path)
    assert traj.num_turns == 3 and traj.messages[0].content == "Be brief."
    texts = [m.content for m in traj.messages if m.role is Role.ASSISTANT]
    assert texts == [r.output_text.strip() for r in (first, second, third)]
    with pytest.raises(openai.BadRequestError) as refused:
        tiny.responses.create(input="Again.", previous_response_id=third.id, **asked)
    assert refused.value.code == "previous_response_not_found"
    assert refused.value.body["param"] == "previous_response_id"
    assert_token_exact(store_path)


def test_a_prompt_longer_than_the_window_is_context_length_exceeded(tiny: OpenAI) -> None:
    """Responses' own error, streamed or not, and Chat Completions' code for it."""
    long = "word " * 5000  # beyond the tiny model's 4,096 tokens
    with pytest.raises(openai.BadRequestError) as refused:
        tiny.responses.create(model="tiny", input=long)
    assert refused.value.code == "context_length_exceeded"
    assert refused.value.body["param"] == "input"
    assert "exceeds the context window" in refused.value.message
    with tiny.responses.stream(model="tiny", input=long) as events:
        last = [event for event in events][-1]
    assert last.type == "response.failed"
    assert last.response.error.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as chat_refused:
        tiny.chat.completions.create(model="tiny", messages=[{"role": "user", "content": long}])
    assert chat_refused.value.code == "context_length_exceeded"
    assert chat_refused.value.body["param"] == "messages"


def test_reasoning_items_passed_back_are_the_turns_reasoning(
    namespaced: OpenAI, store_path: Path
) -> None:
    items: list[Any] = [
        {"role": "user", "content": "What is 2 plus 3?"},
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "I add them."}]},
        {"type": "function_call", "call_id": "call_1", "namespace": "math", "name": "add",
         "arguments": '{"a": 2, "b": 3}'},
        {"type": "function_call_output", "call_id": "call_1", "output": '{"sum": 5}'},
    ]  # fmt: skip
    reply = namespaced.responses.create(model=MODEL, input=items, tools=[MATH])
    assert reply.output_text == "The total is 5."
    (traj,) = recorded(store_path)
    _, assistant, tool, _ = traj.messages
    assert assistant.reasoning == "I add them." and assistant.tool_calls[0].name == "math__add"
    assert tool.tool_call_id == "call_1" and traj.outcome.status is OutcomeStatus.OK


def thinking_server(received: list[dict[str, Any]]) -> FastAPI:
    """A server whose model reasons (vLLM's ``reasoning_content``) and calls ``add``, then
    answers once the result is in."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(body: dict[str, Any]) -> dict[str, Any]:
        received.append(body)
        call = {"id": "call_9", "type": "function",
                "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}  # fmt: skip
        message = {"role": "assistant", "content": "Adding.", "reasoning_content": "Two, three.",
                   "tool_calls": [call]}  # fmt: skip
        if any(m["role"] == "tool" for m in body["messages"]):
            message = {"role": "assistant", "content": "The total is 5."}
        return {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}]}  # fmt: skip

    return app


def test_a_streamed_reply_with_reasoning_is_a_reasoning_item_passed_back(
    tmp_path: Path,
) -> None:
    received: list[dict[str, Any]] = []
    with serving_app(thinking_server(received)) as upstream, TrajectoryStore(tmp_path / "p.db") as store:  # fmt: skip
        spec = f"openai:{upstream}/v1#thinker"
        proxy, _ = open_gateway(PolicyRef(name=spec), store, "proxied")
        with serving(proxy) as url:
            client = OpenAI(base_url=f"{url}/sessions/r/v1", api_key="unused", max_retries=0)
            tool = {"type": "function", **ADD_TOOL["function"]}
            asked: dict[str, Any] = {"model": spec, "tools": [tool]}
            items: list[Any] = [{"role": "user", "content": "What is 2 plus 3?"}]
            with client.responses.stream(input=items, **asked) as events:
                kinds = [event.type for event in events]
                reply = events.get_final_response()
            thought, text, call = reply.output
            assert thought.type == "reasoning" and thought.content[0].text == "Two, three."
            assert (text.type, reply.output_text, call.name) == ("message", "Adding.", "add")
            assert kinds.index("response.reasoning_text.delta") < kinds.index(
                "response.function_call_arguments.delta"
            )
            items += [item.model_dump(exclude_none=True) for item in reply.output]
            items.append({"type": "function_call_output", "call_id": call.call_id,
                          "output": add(call.arguments)})  # fmt: skip
            client.responses.create(input=items, **asked)
        (traj,) = store.query(run="proxied")
    assert traj.messages[1].reasoning == "Two, three." and traj.num_turns == 2
    assert received[1]["messages"][1]["tool_calls"][0]["id"] == "call_9"


def test_a_reply_with_reasoning_reads_back_as_the_same_turn() -> None:
    call = ToolCall(id="call_1", name="math__add", arguments={"a": 2, "b": 3})
    message = Message(role=Role.ASSISTANT, content="Adding.", reasoning="Two and three.",
                      tool_calls=[call])  # fmt: skip
    choice = Choice(message=message, content="Adding.", finish=FinishReason.STOP,
                    prompt_ids=[1], trajectory_id="t")  # fmt: skip
    items = output_items(choice, "msg_1", {"math__add": ("math", "add")})
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call"]
    assert items[2]["namespace"] == "math" and items[2]["name"] == "add"
    (read,) = messages_from_responses(items, None)
    assert (read.reasoning, read.content, read.tool_calls) == (
        "Two and three.", "Adding.", [call]
    )  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "teleport"}]}, "tools[0].type"),
        ({"tools": [{"type": "namespace", "tools": []}]}, "tools[0].name"),
        ({"text": {"format": {"type": "json_object"}}}, "text.format"),
        ({"tool_choice": {"type": "web_search"}}, "tool_choice"),
    ],
)
def test_what_cannot_be_served_is_refused_by_name(
    namespaced: OpenAI, extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        namespaced.responses.create(model=MODEL, input="Hi.", **extra)
    assert refused.value.body["param"] == param
