"""OpenAIPolicy against a local OpenAI-compatible HTTP server started by the test."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from trajforge.policy import openai_compat
from trajforge.policy.base import FinishReason, SamplingParams
from trajforge.policy.openai_compat import OpenAIError, OpenAIPolicy
from trajforge.policy.openai_session import OpenAISession
from trajforge.schema import FunctionSpec, Message, Role, Task, ToolSpec, Trajectory

Reply = tuple[int, Any] | Callable[[dict[str, Any]], tuple[int, Any]]

CALC = ToolSpec(
    function=FunctionSpec(
        name="calculator",
        description="Evaluate an arithmetic expression.",
        parameters={
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    )
)
OPENING = [
    Message(role=Role.SYSTEM, content="Use the calculator."),
    Message(role=Role.USER, content="What is 2+2?"),
]
SAMPLING = SamplingParams(temperature=0.0, max_new_tokens=32, seed=7)


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out closed its socket before the slow reply: expected here.
        return


class FakeServer:
    """Answers each POST with the next scripted reply; records paths and bodies."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[tuple[str, dict[str, Any]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length))
                server.requests.append((self.path, body))
                reply = server.replies.pop(0)
                status, payload = reply(body) if callable(reply) else reply
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if status == 429:
                    self.send_header("retry-after", "0")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as fake:
        yield fake


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_compat, "BACKOFF_BASE_S", 0.01)


def chat_reply(message: dict[str, Any], **extra: Any) -> tuple[int, dict[str, Any]]:
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    choice.update(extra.pop("choice", {}))
    return 200, {"id": "x", "object": "chat.completion", "choices": [choice], **extra}


def logprob_tokens(ids: list[int]) -> dict[str, Any]:
    return {
        "content": [
            {"token": f"token_id:{i}", "logprob": -0.1 * (k + 1)} for k, i in enumerate(ids)
        ]
    }


def run_turns(policy: OpenAIPolicy, observe: list[list[Message]]) -> OpenAISession:
    async def go() -> OpenAISession:
        session = policy.start_session(OPENING, [CALC], task=Task(id="t", prompt="2+2"))
        for turn, observations in enumerate([*observe, []]):
            await policy.respond(session, SAMPLING, turn=turn)
            if observations:
                session.add_observations(observations)
        await policy.close()
        return session

    return asyncio.run(go())


def tool_result(call_id: str, content: str = "4") -> list[Message]:
    return [Message(role=Role.TOOL, content=content, tool_call_id=call_id)]


def test_tool_calls_with_token_ids_make_a_trainable_trajectory(server: FakeServer) -> None:
    call = {
        "id": "server-id",
        "type": "function",
        "function": {"name": "calculator", "arguments": '{"expression": "2+2"}'},
    }
    server.replies = [
        chat_reply(
            {"role": "assistant", "content": None, "tool_calls": [call]},
            prompt_token_ids=[1, 2, 3, 4],
            choice={"token_ids": [10, 11, 12], "logprobs": logprob_tokens([10, 11, 12])},
            usage={"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7},
        ),
        chat_reply(
            {"role": "assistant", "content": "The answer is 4."},
            choice={
                "prompt_token_ids": [1, 2, 3, 4, 10, 11, 12, 99, 5, 6],
                "logprobs": logprob_tokens([20, 21]),
            },
        ),
    ]
    session = run_turns(OpenAIPolicy(server.url, "m"), [tool_result("call_0_0")])

    path, first = server.requests[0]
    assert path == "/v1/chat/completions"
    assert first["tools"] == [CALC.to_openai()]
    assert first["messages"] == [
        {"role": "system", "content": "Use the calculator."},
        {"role": "user", "content": "What is 2+2?"},
    ]
    assert (first["logprobs"], first["return_token_ids"], first["seed"]) == (True, True, 7)
    second = server.requests[1][1]["messages"]
    assert second[2]["tool_calls"][0]["id"] == "call_0_0"
    assert second[2]["tool_calls"][0]["function"]["arguments"] == '{"expression": "2+2"}'
    assert second[3] == {"role": "tool", "content": "4", "tool_call_id": "call_0_0"}

    assert not session.text_only
    system, user, assistant, tool, final = session.messages
    assert assistant.tool_calls[0].id == "call_0_0"
    assert assistant.tool_calls[0].arguments == {"expression": "2+2"}
    assert (system.token_ids, user.token_ids, tool.token_ids) == ([], [1, 2, 3, 4], [99, 5, 6])
    assert (assistant.token_ids, final.token_ids) == ([10, 11, 12], [20, 21])
    assert final.logprobs == pytest.approx([-0.1, -0.2])
    assert final.content == "The answer is 4."
    traj = Trajectory(task=Task(id="t", prompt="2+2"), messages=session.messages)
    assert traj.is_tokenized
    assert session.num_tokens == 12


def test_text_only_server_and_text_protocol_calls(server: FakeServer) -> None:
    text_call = 'Let me compute. <tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>'
    server.replies = [
        chat_reply({"role": "assistant", "content": text_call}, usage={"total_tokens": 40}),
        chat_reply({"role": "assistant", "content": "4"}),
    ]
    session = run_turns(OpenAIPolicy(server.url + "/v1", "m"), [tool_result("call_0_0")])

    assert session.text_only and "no token ids" in (session.text_only_reason or "")
    assert all(m.token_ids is None and m.logprobs is None for m in session.messages)
    assistant = session.messages[2]
    assert assistant.content == "Let me compute."
    assert [(c.id, c.name, c.arguments) for c in assistant.tool_calls] == [
        ("call_0_0", "calculator", {"expression": "2+2"})
    ]
    # The model's own text goes back to the server unchanged.
    assert server.requests[1][1]["messages"][2] == {"role": "assistant", "content": text_call}
    assert not Trajectory(task=Task(id="t", prompt="2+2"), messages=session.messages).is_tokenized
    assert session.num_tokens >= 40


def test_a_re_rendered_context_drops_all_token_ids(server: FakeServer) -> None:
    server.replies = [
        chat_reply(
            {"role": "assistant", "content": "Hmm."},
            prompt_token_ids=[1, 2, 3],
            choice={"token_ids": [7, 8], "logprobs": logprob_tokens([7, 8])},
        ),
        chat_reply(
            {"role": "assistant", "content": "4"},
            prompt_token_ids=[1, 2, 3, 7, 9, 5],
            choice={"token_ids": [4], "logprobs": logprob_tokens([4])},
        ),
    ]
    session = run_turns(OpenAIPolicy(server.url, "m"), [[Message(role=Role.USER, content="go on")]])
    assert session.text_only and "re-rendered" in (session.text_only_reason or "")
    assert all(m.token_ids is None for m in session.messages)


def test_retries_on_server_errors_and_rate_limits(server: FakeServer) -> None:
    server.replies = [
        (500, {"error": "boom"}),
        (429, {"error": "slow down"}),
        chat_reply({"role": "assistant", "content": "4"}),
    ]
    session = run_turns(OpenAIPolicy(server.url, "m", max_retries=3), [])
    assert session.messages[-1].content == "4"
    assert len(server.requests) == 3

    server.replies = [(503, {"error": "down"})] * 3
    with pytest.raises(OpenAIError, match=r"HTTP 503 after 3 attempts"):
        run_turns(OpenAIPolicy(server.url, "m", max_retries=2), [])

    server.replies = [(401, {"error": "bad key"}), chat_reply({"content": "never"})]
    with pytest.raises(OpenAIError, match=r"HTTP 401 after 1 attempts.*bad key"):
        run_turns(OpenAIPolicy(server.url, "m", api_key="k"), [])
    assert len(server.replies) == 1


def test_timeouts_are_retried_then_reported(server: FakeServer) -> None:
    def slow(body: dict[str, Any]) -> tuple[int, Any]:
        time.sleep(1.0)
        return chat_reply({"role": "assistant", "content": "late"})

    server.replies = [slow, chat_reply({"role": "assistant", "content": "on time"})]
    session = run_turns(OpenAIPolicy(server.url, "m", timeout_s=0.3, max_retries=1), [])
    assert session.messages[-1].content == "on time"

    server.replies = [slow, slow]
    with pytest.raises(OpenAIError, match=r"timed out after 2 attempts"):
        run_turns(OpenAIPolicy(server.url, "m", timeout_s=0.3, max_retries=1), [])


def test_servers_without_token_id_extensions_are_asked_again(server: FakeServer) -> None:
    server.replies = [
        (400, {"error": {"message": "Unrecognized request argument supplied: return_token_ids"}}),
        chat_reply({"role": "assistant", "content": "4"}),
    ]
    policy = OpenAIPolicy(server.url, "m")
    session = run_turns(policy, [])
    assert session.messages[-1].content == "4"
    assert "return_token_ids" not in server.requests[1][1]
    assert not policy.token_ids


def test_generate_sends_token_ids_to_completions(server: FakeServer) -> None:
    server.replies = [
        (
            200,
            {
                "choices": [
                    {
                        "text": " four",
                        "finish_reason": "length",
                        "logprobs": {
                            "tokens": ["token_id:42", "token_id:43"],
                            "token_logprobs": [-0.5, -0.25],
                        },
                    }
                ]
            },
        ),
        (200, {"choices": [{"text": "plain", "finish_reason": "stop"}]}),
    ]
    policy = OpenAIPolicy(server.url, "m")
    sampling = SamplingParams(temperature=0.5, max_new_tokens=2, stop=["\n"])
    with_ids = asyncio.run(policy.generate([5, 6, 7], sampling))
    plain = asyncio.run(policy.generate([5], sampling))
    path, body = server.requests[0]
    assert (path, body["prompt"], body["max_tokens"], body["stop"]) == (
        "/v1/completions",
        [5, 6, 7],
        2,
        ["\n"],
    )
    assert (with_ids.token_ids, with_ids.logprobs) == ([42, 43], [-0.5, -0.25])
    assert (with_ids.text, with_ids.finish_reason) == (" four", FinishReason.LENGTH)
    assert (plain.token_ids, plain.logprobs, plain.text) == ([], None, "plain")


def test_malformed_replies_are_reported(server: FakeServer) -> None:
    server.replies = [(200, {"choices": []})]
    with pytest.raises(OpenAIError, match="no choices"):
        run_turns(OpenAIPolicy(server.url, "m"), [])
