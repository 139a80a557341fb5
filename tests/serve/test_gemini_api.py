"""Agent loops written with the official ``google-genai`` SDK against ``trajforge serve``'s
Gemini API: one token-exact trajectory per run, streamed or not, and the API's own errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors, types
from serve_helpers import ADD_TOOL, MODEL, assert_token_exact, recorded, seeing_server

from image_samples import png_bytes
from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.schema import ImagePart, OutcomeStatus, Role
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving, serving_app
from trajforge.serve.upstream import UpstreamGateway
from trajforge.store import TrajectoryStore

SCHEMA = ADD_TOOL["function"]["parameters"]
ADD = types.FunctionDeclaration(
    name="add", description="Add two integers.", parameters_json_schema=SCHEMA
)
SYSTEM = "You add numbers with the add tool."
IMAGE = ImagePart.from_bytes(png_bytes(9))


def client(
    base_url: str, session: str | None = None, key: str = "dummy", version: str | None = None
) -> genai.Client:
    """The SDK on the gateway: on ``v1``, its default where a base URL is given, or ``version``
    (``v1beta``, as Gemini CLI asks)."""
    root = f"{base_url}/sessions/{session}" if session else base_url
    options = types.HttpOptions(base_url=root, api_version=version)
    return genai.Client(api_key=key, http_options=options)


def config(**extra: Any) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(
        system_instruction=SYSTEM, tools=[types.Tool(function_declarations=[ADD])], **extra
    )


def answers(calls: list[types.FunctionCall], with_ids: bool) -> types.Content:
    """The user turn answering ``calls``: by id, or by name alone as the SDK's helper does."""
    parts = []
    for call in calls:
        args = call.args or {}
        result = {"sum": args["a"] + args["b"]}
        if with_ids:
            response = types.FunctionResponse(id=call.id, name=call.name, response=result)
            parts.append(types.Part(function_response=response))
        else:
            parts.append(types.Part.from_function_response(name=call.name or "", response=result))
    return types.Content(role="user", parts=parts)


def streamed(sdk: genai.Client, contents: list[types.Content]) -> types.GenerateContentResponse:
    """A streamed reply merged as a client merges it: the text of every chunk, the last
    chunk's calls, finish reason and usage."""
    chunks = list(sdk.models.generate_content_stream(model=MODEL, contents=contents, config=config()))  # fmt: skip
    text = "".join(c.text or "" for c in chunks if c.candidates and c.candidates[0].content)
    last = chunks[-1]
    parts = [types.Part(text=text)] if text else []
    parts += [types.Part(function_call=call) for call in last.function_calls or []]
    assert last.candidates is not None
    candidate = last.candidates[0].model_copy(
        update={"content": types.Content(role="model", parts=parts)}
    )
    return last.model_copy(update={"candidates": [candidate]})


def run_agent(
    sdk: genai.Client, question: str, stream: bool
) -> list[types.GenerateContentResponse]:
    """The SDK's function-calling loop; the replies."""
    contents = [types.Content(role="user", parts=[types.Part(text=question)])]
    replies = []
    while True:
        if stream:
            reply = streamed(sdk, contents)
        else:
            reply = sdk.models.generate_content(model=MODEL, contents=contents, config=config())
        replies.append(reply)
        assert reply.candidates and reply.candidates[0].content
        contents.append(reply.candidates[0].content)
        if not reply.function_calls:
            return replies
        contents.append(answers(reply.function_calls, with_ids=stream))


@pytest.mark.parametrize("stream", [False, True])
def test_a_function_call_loop_is_one_token_exact_trajectory(
    base_url: str, store_path: Path, stream: bool
) -> None:
    replies = run_agent(client(base_url, "run-1"), "What is 3 plus 4 plus 5?", stream)
    assert [r.candidates[0].finish_reason for r in replies if r.candidates] == [
        types.FinishReason.STOP
    ] * 3
    (first,) = replies[0].function_calls or []
    assert first.name == "add" and first.args == {"a": 3, "b": 4} and first.id
    assert replies[-1].text == "The total is 12."
    (traj,) = recorded(store_path)
    assert traj.outcome.status is OutcomeStatus.OK and traj.num_turns == 3
    roles = [m.role for m in traj.messages]
    assert roles == [Role.SYSTEM, Role.USER] + [Role.ASSISTANT, Role.TOOL] * 2 + [Role.ASSISTANT]
    assert traj.messages[0].content == SYSTEM
    assert traj.messages[3].content == '{"sum": 7}'
    assert traj.messages[3].tool_call_id == traj.messages[2].tool_calls[0].id == first.id
    assert traj.tools[0].function.name == "add" and traj.tools[0].function.parameters == SCHEMA
    client_info = traj.metadata["gateway"]["client"]
    assert client_info["name"] == "google-genai-sdk"
    assert client_info["version"] == genai.__version__
    assert f"google-genai-sdk/{genai.__version__}" in client_info["api_client"]
    usage = [r.usage_metadata for r in replies]
    assert all(u and u.total_token_count == (u.prompt_token_count or 0) + (u.candidates_token_count or 0) for u in usage)  # fmt: skip
    assert sum(u.candidates_token_count or 0 for u in usage if u) == traj.usage.completion_tokens
    assert_token_exact(store_path)


def test_count_tokens_is_the_prompt_the_call_is_given(base_url: str, store_path: Path) -> None:
    sdk = client(base_url, "count")
    question = "What is 1?"
    counted = sdk.models.count_tokens(model=MODEL, contents=question)
    reply = sdk.models.generate_content(model=MODEL, contents=question)
    assert reply.usage_metadata is not None
    assert counted.total_tokens == reply.usage_metadata.prompt_token_count
    (traj,) = recorded(store_path)
    prompt = sum(len(m.token_ids or []) for m in traj.messages if m.role is not Role.ASSISTANT)
    assert counted.total_tokens == prompt > 0
    # The whole request form counts what a call with tools and a system instruction is given.
    asked = {"generateContentRequest": {
        "model": f"models/{MODEL}", "contents": [{"role": "user", "parts": [{"text": question}]}],
        "systemInstruction": {"parts": [{"text": SYSTEM}]},
        "tools": [{"functionDeclarations": [{"name": "add", "parameters": SCHEMA}]}]}}  # fmt: skip
    with_tools = httpx.post(f"{base_url}/v1beta/models/{MODEL}:countTokens", json=asked,
                            headers={"x-goog-api-key": "d"}, timeout=30)  # fmt: skip
    assert with_tools.status_code == 200
    assert with_tools.json()["totalTokens"] > counted.total_tokens
    assert len(recorded(store_path)) == 1  # counting records nothing


@pytest.mark.parametrize("version", [None, "v1beta"])
def test_the_sdk_lists_and_gets_the_served_model(base_url: str, version: str | None) -> None:
    sdk = client(base_url, version=version)
    (model,) = list(sdk.models.list())
    assert model.name == f"models/{MODEL}"
    assert model.supported_actions and "generateContent" in model.supported_actions
    assert sdk.models.get(model=MODEL).display_name == MODEL
    with pytest.raises(errors.ClientError) as exc:
        sdk.models.get(model="gemini-9-pro")
    assert exc.value.code == 404 and "'gemini-9-pro' is not served" in (exc.value.message or "")
    if version == "v1beta":  # v1's model routes are OpenAI's, with OpenAI's error body
        assert exc.value.status == "NOT_FOUND"
    reply = sdk.models.generate_content(model=f"models/{MODEL}", contents="What is 4?")
    assert reply.text == "The total is 4."


def test_a_model_streams_token_by_token_the_reply_it_samples_whole(
    tiny_url: str, store_path: Path
) -> None:
    sdk = client(tiny_url)
    # One seed, so both calls sample the same reply.
    asked = types.GenerateContentConfig(max_output_tokens=24, seed=7)
    whole = sdk.models.generate_content(model="tiny", contents="Tell me a story.", config=asked)
    chunks = list(
        sdk.models.generate_content_stream(model="tiny", contents="Tell me a story.", config=asked)
    )
    text = "".join(c.text or "" for c in chunks)
    assert text == whole.text and len(chunks) > 2
    assert whole.candidates and whole.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    last = chunks[-1]
    assert last.candidates and last.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert last.usage_metadata == whole.usage_metadata
    assert whole.usage_metadata and whole.usage_metadata.candidates_token_count == 24
    first, second = recorded(store_path)
    assert [m.token_ids for m in first.messages] == [m.token_ids for m in second.messages]
    assert first.outcome.status is OutcomeStatus.TRUNCATED
    assert_token_exact(store_path)


def test_schemas_in_the_apis_own_form_and_tool_config_none(base_url: str, store_path: Path) -> None:
    declared = types.FunctionDeclaration(name="add", parameters=types.Schema(
        type=types.Type.OBJECT, required=["a"],
        properties={"a": types.Schema(type=types.Type.INTEGER),
                    "b": types.Schema(type=types.Type.ARRAY,
                                      items=types.Schema(type=types.Type.STRING))}))  # fmt: skip
    sdk = client(base_url, "schema")
    sdk.models.generate_content(model=MODEL, contents="What is 5?", config=types.GenerateContentConfig(tools=[types.Tool(function_declarations=[declared])]))  # fmt: skip
    none = types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode=types.FunctionCallingConfigMode.NONE))  # fmt: skip
    sdk.models.generate_content(model=MODEL, contents="What is 6?", config=config(tool_config=none))
    first, second = recorded(store_path)
    assert first.tools[0].function.parameters == {
        "type": "object", "required": ["a"],
        "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "string"}}},
    }  # fmt: skip
    assert second.tools == []


def test_an_inline_image_is_recorded_as_the_image_part_every_route_records(
    tmp_path: Path,
) -> None:
    received: list[dict[str, Any]] = []
    image = types.Part.from_bytes(data=IMAGE.data or b"", mime_type="image/png")
    with TrajectoryStore(tmp_path / "proxy.db") as store:
        with serving_app(seeing_server(received)) as upstream_url:
            proxy = UpstreamGateway(f"{upstream_url}/v1", "vlm", store, "proxied")
            with serving(proxy) as url:
                sdk = client(url)  # held: a client that is collected closes its connection
                reply = sdk.models.generate_content(
                    model="vlm", contents=[image, "What is in the picture?"]
                )
                with pytest.raises(errors.ClientError) as exc:
                    sdk.models.count_tokens(model="vlm", contents=[image])
        (traj,) = store.query(run="proxied")
    assert reply.text == "A grey square."
    assert exc.value.code == 400 and "cannot count its prompts" in (exc.value.message or "")
    sent = received[0]["messages"][0]["content"]
    assert sent[0]["image_url"]["url"] == IMAGE.data_url()
    assert traj.messages[0].images == [IMAGE] and traj.messages[0].text == "What is in the picture?"


ASK = "What is 2 plus 3?"


def _refused(call: Any, code: int, status: str) -> str:
    with pytest.raises(errors.ClientError) as exc:
        call()
    assert (exc.value.code, exc.value.status) == (code, status), exc.value.details
    assert exc.value.details["error"]["code"] == code
    return exc.value.message or ""


def test_bad_requests_are_invalid_argument_naming_the_field(base_url: str) -> None:
    sdk = client(base_url)

    def generate(**extra: Any) -> Any:
        return lambda: sdk.models.generate_content(
            model=MODEL, contents=ASK, config=types.GenerateContentConfig(**extra)
        )

    forced = types.ToolConfig(
        function_calling_config=types.FunctionCallingConfig(
            mode=types.FunctionCallingConfigMode.ANY
        )
    )
    refused = [
        (generate(candidate_count=2), "generationConfig.candidateCount: not supported"),
        (generate(top_k=-1), "generationConfig.topK:"),
        (generate(temperature=3), "generationConfig.temperature:"),
        (generate(response_mime_type="application/json"), "generationConfig.responseMimeType"),
        (generate(tools=[types.Tool(google_search=types.GoogleSearch())]), "tools[0].googleSearch"),
        (generate(tool_config=forced), "toolConfig.functionCallingConfig.mode"),
    ]
    for call, named in refused:
        assert _refused(call, 400, "INVALID_ARGUMENT").startswith(named)
    remote = types.Part.from_uri(file_uri="https://x/a.png", mime_type="image/png")
    message = _refused(lambda: sdk.models.generate_content(model=MODEL, contents=[remote]), 400, "INVALID_ARGUMENT")  # fmt: skip
    assert message.startswith("contents[0].parts[0]: a user turn holds") and "fileData" in message
    stray = types.Content(role="user", parts=[types.Part.from_function_response(name="add", response={})])  # fmt: skip
    message = _refused(lambda: sdk.models.generate_content(model=MODEL, contents=[stray]), 400, "INVALID_ARGUMENT")  # fmt: skip
    assert "answers no functionCall" in message


def test_an_unknown_model_is_not_found(base_url: str) -> None:
    sdk = client(base_url)
    for call in (
        lambda: sdk.models.generate_content(model="gemini-9-pro", contents=ASK),
        lambda: list(sdk.models.generate_content_stream(model="gemini-9-pro", contents=ASK)),
        lambda: sdk.models.count_tokens(model="gemini-9-pro", contents=ASK),
    ):
        assert "'gemini-9-pro' is not served" in _refused(call, 404, "NOT_FOUND")


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_longer_than_the_window_is_refused_never_cut(
    base_url: str, gateway: Gateway, store_path: Path, stream: bool
) -> None:
    sdk = client(base_url)
    counted = sdk.models.count_tokens(model=MODEL, contents=ASK).total_tokens or 0
    gateway.policy.max_context_tokens = counted  # no room left for a reply
    generate = sdk.models.generate_content_stream if stream else sdk.models.generate_content
    message = _refused(lambda: list(generate(model=MODEL, contents=ASK)), 400, "INVALID_ARGUMENT")  # type: ignore[arg-type]
    assert message == (
        f"The input token count ({counted}) exceeds the maximum number of tokens allowed "
        f"({counted - 1})."
    )
    (traj,) = recorded(store_path)
    assert traj.outcome.status is OutcomeStatus.TRUNCATED and traj.num_turns == 0


def test_a_call_needs_a_key_but_any_key_is_taken(base_url: str) -> None:
    keyless = client(base_url)
    keyless._api_client._http_options.headers.pop("x-goog-api-key")  # the SDK sends one
    message = _refused(lambda: keyless.models.generate_content(model=MODEL, contents=ASK), 403, "PERMISSION_DENIED")  # fmt: skip
    assert message.startswith("Method doesn't allow unregistered callers")
    url = f"{base_url}/v1beta/models/{MODEL}:generateContent"
    call = {"contents": [{"parts": [{"text": ASK}]}]}
    blank = httpx.post(url, json=call, params={"key": ""}, timeout=30)
    assert blank.status_code == 400
    assert blank.json()["error"] == {"code": 400, "status": "INVALID_ARGUMENT",
                                     "message": "API key not valid. Please pass a valid API key."}  # fmt: skip
    for where in ({"params": {"key": "k"}}, {"headers": {"Authorization": "Bearer t"}}):
        reply = httpx.post(url, json=call, timeout=30, **where)  # type: ignore[arg-type]
        assert reply.status_code == 200 and reply.json()["candidates"][0]["finishReason"] == "STOP"
    unknown = httpx.post(f"{base_url}/v1beta/models/{MODEL}:embedContent", json=call,
                         params={"key": "k"}, timeout=30)  # fmt: skip
    assert unknown.status_code == 404 and unknown.json()["error"]["status"] == "NOT_FOUND"
    bad_json = httpx.post(url, content=b"{not json", params={"key": "k"}, timeout=30)
    assert bad_json.status_code == 400 and "not valid JSON" in bad_json.json()["error"]["message"]


def test_a_text_only_model_refuses_an_image_naming_the_message(base_url: str) -> None:
    sdk = client(base_url)
    image = types.Part.from_bytes(data=IMAGE.data or b"", mime_type="image/png")
    message = _refused(lambda: sdk.models.generate_content(model=MODEL, contents=[image, ASK]), 400, "INVALID_ARGUMENT")  # fmt: skip
    assert "handles text only and this message has an image part" in message
    broken = types.Part.from_bytes(data=b"\x89PNG", mime_type="image/png")
    message = _refused(lambda: sdk.models.generate_content(model=MODEL, contents=[broken]), 400, "INVALID_ARGUMENT")  # fmt: skip
    assert message.startswith("contents[0].parts[0].inlineData: declared image/png")


def test_a_malformed_call_ends_the_reply_as_the_api_ends_it(store_path: Path) -> None:
    policy = ScriptedPolicy(["<tool_call>{not json</tool_call>"], load_tokenizer(), name=MODEL)
    with TrajectoryStore(store_path) as store, serving(Gateway(policy, store, "gw")) as url:
        sdk = client(url)
        cfg = config()
        reply = sdk.models.generate_content(model=MODEL, contents=ASK, config=cfg)
        whole = httpx.post(f"{url}/v1beta/models/{MODEL}:streamGenerateContent",
                           json={"contents": [{"parts": [{"text": ASK}]}]},
                           params={"key": "k"}, timeout=30)  # fmt: skip
    assert reply.candidates and reply.candidates[0].finish_reason == types.FinishReason.MALFORMED_FUNCTION_CALL  # fmt: skip
    assert not reply.function_calls
    (chunk,) = whole.json()  # a stream asked without alt=sse: the API's JSON array
    assert chunk["candidates"][0]["finishReason"] == "MALFORMED_FUNCTION_CALL"
    assert chunk["usageMetadata"]["candidatesTokenCount"] > 0
