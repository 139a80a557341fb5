"""Image parts in chat-completion calls: a text-only model answers with OpenAI's error body
naming the message and why; forwarded to a server that takes them, they are recorded with
equal bytes."""

from __future__ import annotations

from typing import Any

import httpx
from serve_helpers import MODEL, seeing_server

from image_samples import png_bytes
from trajforge.schema import ImagePart, Trajectory
from trajforge.serve.server import serving, serving_app
from trajforge.serve.upstream import UpstreamGateway
from trajforge.store import TrajectoryStore

IMAGE = ImagePart.from_bytes(png_bytes(9))
LOOK = {
    "role": "user",
    "content": [
        {"type": "text", "text": "What is in the picture?"},
        {"type": "image_url", "image_url": {"url": IMAGE.data_url()}},
    ],
}


def test_a_text_only_model_refuses_images_in_openais_error_shape(base_url: str) -> None:
    call = {"model": MODEL, "messages": [{"role": "system", "content": "Be brief."}, LOOK]}
    reply = httpx.post(f"{base_url}/sessions/s/v1/chat/completions", json=call, timeout=30)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "messages[1]"
    assert error["message"].startswith("messages[1]: ")
    assert "handles text only and this message has an image part" in error["message"]


def test_a_broken_image_is_a_400_naming_the_part(base_url: str) -> None:
    broken = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    call = {"model": MODEL, "messages": [{"role": "user", "content": [broken]}]}
    reply = httpx.post(f"{base_url}/sessions/s/v1/chat/completions", json=call, timeout=30)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == "messages[0].content[0].image_url"
    assert "declared image/png but the bytes are not a PNG, JPEG or WebP image" in error["message"]


def _forwarded(
    tmp_path: Any, route: str, call: dict[str, Any]
) -> tuple[dict[str, Any], Trajectory, httpx.Response]:
    """``call`` sent to the gateway's ``route`` and forwarded to a server that takes images:
    the body that server got, the trajectory recorded and the gateway's reply."""
    received: list[dict[str, Any]] = []
    with TrajectoryStore(tmp_path / "proxy.db") as store:
        with serving_app(seeing_server(received)) as upstream_url:
            proxy = UpstreamGateway(f"{upstream_url}/v1", "vlm", store, "proxied")
            with serving(proxy) as url:
                reply = httpx.post(f"{url}/sessions/s/v1/{route}", json=call, timeout=30)
                assert reply.status_code == 200, reply.text
        (traj,) = store.query(run="proxied")
    return received[0], traj, reply


def test_a_forwarded_call_records_its_images(tmp_path: Any) -> None:
    call = {"model": "vlm", "messages": [LOOK]}
    sent, traj, _ = _forwarded(tmp_path, "chat/completions", call)
    assert sent["messages"][0]["content"][1]["image_url"]["url"] == IMAGE.data_url()
    assert traj.messages[0].images == [IMAGE]
    assert traj.messages[0].text == "What is in the picture?"
    assert traj.messages[1].content == "A grey square."


RESPONSES_LOOK = {
    "role": "user",
    "content": [
        {"type": "input_text", "text": "What is in the picture?"},
        {"type": "input_image", "image_url": IMAGE.data_url(), "detail": "auto"},
    ],
}


def test_responses_input_images_reach_a_text_only_model_as_its_400(base_url: str) -> None:
    call = {"model": MODEL, "input": [RESPONSES_LOOK]}
    reply = httpx.post(f"{base_url}/sessions/s/v1/responses", json=call, timeout=30)
    assert reply.status_code == 400
    assert (
        "handles text only and this message has an image part" in reply.json()["error"]["message"]
    )
    remote = {"type": "input_image", "image_url": "https://example.com/a.png"}
    call = {"model": MODEL, "input": [{"role": "user", "content": [remote]}]}
    reply = httpx.post(f"{base_url}/sessions/s/v1/responses", json=call, timeout=30)
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "input[0].content[0].image_url"


def test_a_forwarded_responses_call_records_its_images(tmp_path: Any) -> None:
    call = {"model": "vlm", "input": [RESPONSES_LOOK]}
    sent, traj, reply = _forwarded(tmp_path, "responses", call)
    assert sent["messages"][0]["content"][1]["image_url"]["url"] == IMAGE.data_url()
    assert traj.messages[0].images == [IMAGE]
    assert reply.json()["output"][0]["content"][0]["text"] == "A grey square."
