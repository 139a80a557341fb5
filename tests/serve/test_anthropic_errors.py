"""The Messages API's own error shapes and statuses, as the ``anthropic`` SDK raises them, and
its image blocks: refused by a text-only model, recorded with equal bytes when forwarded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from anthropic import Anthropic
from serve_helpers import MODEL, seeing_server

from image_samples import png_bytes
from trajforge.schema import ImagePart, OutcomeStatus
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving, serving_app
from trajforge.serve.upstream import UpstreamGateway
from trajforge.store import TrajectoryStore

IMAGE = ImagePart.from_bytes(png_bytes(9))
ASK = [{"role": "user", "content": "What is 2 plus 3?"}]


@pytest.fixture
def sdk(base_url: str) -> Anthropic:
    return Anthropic(base_url=base_url, api_key="dummy", max_retries=0)


def _error(exc: pytest.ExceptionInfo[anthropic.APIStatusError]) -> dict[str, Any]:
    body = exc.value.body
    assert isinstance(body, dict) and body["type"] == "error", body
    error: dict[str, Any] = body["error"]
    return error


def test_a_bad_request_is_an_invalid_request_error(sdk: Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as exc:
        sdk.messages.create(model=MODEL, max_tokens=0, messages=ASK)
    error = _error(exc)
    assert error["type"] == "invalid_request_error" and error["message"].startswith("max_tokens:")
    with pytest.raises(anthropic.BadRequestError) as exc:
        sdk.messages.create(model=MODEL, max_tokens=9, messages=[{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "data": "x"}}]}])  # fmt: skip
    assert _error(exc)["message"].startswith("messages[0].content[0]: Input tag 'document'")


def test_what_cannot_be_honoured_is_refused_by_name(sdk: Anthropic) -> None:
    refused: list[tuple[dict[str, Any], str]] = [
        ({"tool_choice": {"type": "tool", "name": "add"}}, "tool_choice.type"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
        ({"extra_body": {"top_k": -1}}, "top_k"),
        ({"output_config": {"format": {"type": "json_schema", "schema": {}}}}, "output_config"),
    ]
    for extra, named in refused:
        with pytest.raises(anthropic.BadRequestError) as exc:
            sdk.messages.create(model=MODEL, max_tokens=9, messages=ASK, **extra)
        assert _error(exc)["message"].startswith(named), extra
    prefill = [*ASK, {"role": "assistant", "content": "The"}]
    with pytest.raises(anthropic.BadRequestError) as exc:
        sdk.messages.create(model=MODEL, max_tokens=9, messages=prefill)
    assert "ends with an assistant message" in _error(exc)["message"]


def test_an_unknown_model_is_not_found(sdk: Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as exc:
        sdk.messages.create(model="claude-opus-9", max_tokens=9, messages=ASK)
    error = _error(exc)
    assert (
        error["type"] == "not_found_error" and "'claude-opus-9' is not served" in error["message"]
    )
    with pytest.raises(anthropic.NotFoundError):
        sdk.messages.count_tokens(model="claude-opus-9", messages=ASK)


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_longer_than_the_window_is_too_long_never_cut(
    sdk: Anthropic, gateway: Gateway, store_path: Path, stream: bool
) -> None:
    counted = sdk.messages.count_tokens(model=MODEL, messages=ASK)
    gateway.policy.max_context_tokens = counted.input_tokens  # no room left for a reply
    with pytest.raises(anthropic.BadRequestError) as exc:
        sdk.messages.create(model=MODEL, max_tokens=9, messages=ASK, stream=stream)
    error = _error(exc)
    assert error["type"] == "invalid_request_error"
    limit = counted.input_tokens - 1
    assert (
        error["message"] == f"prompt is too long: {counted.input_tokens} tokens > {limit} maximum"
    )
    with TrajectoryStore(store_path) as store:
        (traj,) = store.query(run="gw")
    assert traj.outcome.status is OutcomeStatus.TRUNCATED and traj.num_turns == 0


def test_the_openai_route_keeps_its_own_context_error(base_url: str, gateway: Gateway) -> None:
    gateway.policy.max_context_tokens = 5
    call = {"model": MODEL, "messages": ASK}
    reply = httpx.post(f"{base_url}/v1/chat/completions", json=call, timeout=30)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["message"] == "messages: the conversation fills the model's context"


def test_bodies_that_are_no_request_get_the_apis_shape(base_url: str) -> None:
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        reply = httpx.post(f"{base_url}{path}", content=b"{not json", timeout=30)
        assert reply.status_code == 400
        body = reply.json()
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert "not valid JSON" in body["error"]["message"]


def test_any_key_is_taken_as_on_the_openai_routes(base_url: str) -> None:
    """The gateway checks no key on any route: a harness's dummy key, in either header."""
    call = {"model": MODEL, "max_tokens": 20, "messages": ASK}
    for headers in ({"x-api-key": "anything"}, {"Authorization": "Bearer sk-dummy"}, {}):
        reply = httpx.post(f"{base_url}/v1/messages", json=call, headers=headers, timeout=30)
        assert reply.status_code == 200 and reply.json()["type"] == "message", reply.text


def _image_block(data: str, media_type: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


LOOK = {"role": "user", "content": [
    {"type": "text", "text": "What is in the picture?"},
    _image_block(IMAGE.data_url().split(",", 1)[1]),
]}  # fmt: skip


def test_a_text_only_model_refuses_an_image_naming_the_message(sdk: Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as exc:
        sdk.messages.create(model=MODEL, max_tokens=9, messages=[LOOK])
    assert "handles text only and this message has an image part" in _error(exc)["message"]
    broken = {"role": "user", "content": [_image_block("AAAA")]}
    with pytest.raises(anthropic.BadRequestError) as exc:
        sdk.messages.create(model=MODEL, max_tokens=9, messages=[broken])
    assert _error(exc)["message"].startswith("messages[0].content[0].source: declared image/png")
    remote = {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://x"}}]}  # fmt: skip
    with pytest.raises(anthropic.BadRequestError) as exc:
        sdk.messages.create(model=MODEL, max_tokens=9, messages=[remote])
    assert "only base64 images are taken" in _error(exc)["message"]


def test_an_image_block_is_recorded_as_the_image_part_every_route_records(
    tmp_path: Path,
) -> None:
    received: list[dict[str, Any]] = []
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
              "content": [{"type": "text", "text": "shot:"}, LOOK["content"][1]]}]}  # fmt: skip
    used = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
            "name": "screenshot", "input": {}}]}  # fmt: skip
    with TrajectoryStore(tmp_path / "proxy.db") as store:
        with serving_app(seeing_server(received)) as upstream_url:
            proxy = UpstreamGateway(f"{upstream_url}/v1", "vlm", store, "proxied")
            with serving(proxy) as url:
                sdk = Anthropic(base_url=url, api_key="d", max_retries=0)
                reply = sdk.messages.create(
                    model="vlm", max_tokens=20, messages=[LOOK, used, result]
                )
                with pytest.raises(anthropic.BadRequestError) as exc:
                    sdk.messages.count_tokens(model="vlm", messages=[LOOK])
        (traj,) = store.query(run="proxied")
    assert reply.content[0].text == "A grey square."
    assert "cannot count its prompts" in _error(exc)["message"]
    sent = received[0]["messages"]
    assert sent[0]["content"][1]["image_url"]["url"] == IMAGE.data_url()
    assert traj.messages[0].images == [IMAGE] and traj.messages[0].text == "What is in the picture?"
    assert traj.messages[2].images == [IMAGE] and traj.messages[2].tool_call_id == "1"
    assert traj.messages[3].content == "A grey square."
