"""Top-k through every API of the gateway: Anthropic's ``top_k``, Gemini's ``topK`` and vLLM's
``top_k`` on Chat Completions sample from the k most likely tokens (``top_k`` 1 is the greedy
reply, whatever the seed), and a gateway in front of another server passes it on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from anthropic import Anthropic
from google import genai
from google.genai import types
from openai import OpenAI
from serve_helpers import seeing_server

from trajforge.serve.server import serving, serving_app
from trajforge.serve.upstream import UpstreamGateway
from trajforge.store import TrajectoryStore

ASK = "Tell me a story."
TOKENS = 16


def _openai(url: str, **sampling: Any) -> str:
    sdk = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    top_k = sampling.pop("top_k", None)
    reply = sdk.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": ASK}],
        max_tokens=TOKENS,
        extra_body=None if top_k is None else {"top_k": top_k},
        **sampling,
    )
    return reply.choices[0].message.content or ""


def _anthropic(url: str, **sampling: Any) -> str:
    sdk = Anthropic(base_url=url, api_key="dummy", max_retries=0)
    # This SDK's version types no sampling fields; the API takes them in the body.
    reply = sdk.messages.create(
        model="tiny",
        max_tokens=TOKENS,
        messages=[{"role": "user", "content": ASK}],
        extra_body=sampling,
    )
    return "".join(block.text for block in reply.content if block.type == "text")


def _gemini(url: str, **sampling: Any) -> str:
    sdk = genai.Client(api_key="dummy", http_options=types.HttpOptions(base_url=url))
    config = types.GenerateContentConfig(max_output_tokens=TOKENS, **sampling)
    return sdk.models.generate_content(model="tiny", contents=ASK, config=config).text or ""


@pytest.mark.parametrize("ask", [_openai, _anthropic, _gemini], ids=["chat", "messages", "gemini"])
def test_top_k_one_samples_the_greedy_reply_whatever_the_seed(tiny_url: str, ask: Any) -> None:
    greedy = ask(tiny_url, temperature=0.0, seed=0)
    assert greedy
    assert {ask(tiny_url, temperature=1.0, top_k=1, seed=seed) for seed in (1, 2, 3)} == {greedy}
    # Without the cut, the same seeds sample other replies: the cut is what made them greedy.
    assert {ask(tiny_url, temperature=1.0, seed=seed) for seed in (1, 2, 3)} != {greedy}


def test_a_negative_top_k_is_refused_naming_the_field(tiny_url: str) -> None:
    with pytest.raises(Exception, match="top_k"):
        _anthropic(tiny_url, temperature=1.0, top_k=-1, seed=0)


def test_an_upstream_gateway_passes_top_k_on(tmp_path: Path) -> None:
    received: list[dict[str, Any]] = []
    with (
        TrajectoryStore(tmp_path / "proxy.db") as store,
        serving_app(seeing_server(received)) as upstream_url,
        serving(UpstreamGateway(f"{upstream_url}/v1", "tiny", store, "proxied")) as url,
    ):
        _openai(url, temperature=1.0, top_k=5, seed=0)
        _anthropic(url, temperature=1.0, top_k=3, seed=0)
    assert [body.get("top_k") for body in received] == [5, 3]
