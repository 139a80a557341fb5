"""Many adapters behind one gateway: ``model: BASE:ADAPTER`` (or the adapter's own name) decodes
with that adapter, every other call keeps its own weights, and an adapter that is not loaded is
a 404 naming the loaded ones."""

from __future__ import annotations

import asyncio
import contextlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from peft import LoraConfig, get_peft_model

from trajforge.cli.serve_cmds import parse_lora_module
from trajforge.errors import ConfigError
from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.policy.naming import load_policy
from trajforge.serve.adapter_routing import load_adapters
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving
from trajforge.store import TrajectoryStore

REQUEST = {"messages": [{"role": "user", "content": "Hello there, how are you?"}],
           "max_tokens": 6, "temperature": 1.0, "seed": 5, "logprobs": True,
           "return_token_ids": True}  # fmt: skip
TOLERANCE = 1024 * torch.finfo(torch.float32).eps
"""fp32 log-probabilities from the engine and from PEFT's forward: 1024 ulps (1.2e-4) cover the
different summation orders of batched and unbatched matmuls."""


def _trained(seed: int, folder: Path) -> Any:
    torch.manual_seed(seed)
    model = get_peft_model(
        tiny_model_and_tokenizer(seed=0)[0],
        LoraConfig(r=4, lora_alpha=8, init_lora_weights=False, target_modules="all-linear"),
    )
    model.save_pretrained(folder)
    return model


def _logprobs(model: Any, prompt: list[int], sampled: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + sampled])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return torch.stack([logprobs[len(prompt) - 1 + k, t] for k, t in enumerate(sampled)])


def _call(url: str, model: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json={**REQUEST, "model": model}, timeout=60)


def test_calls_route_to_their_adapter_in_one_batch(tmp_path: Path) -> None:
    trained = {name: _trained(seed, tmp_path / name) for seed, name in enumerate(["a", "b"])}
    policy = load_policy("tiny")
    with TrajectoryStore(tmp_path / "gw.db") as store:
        gateway = Gateway(policy, store, "gw")
        with serving(gateway) as url:
            for name in trained:
                loaded = httpx.post(f"{url}/v1/load_lora_adapter",
                                    json={"lora_name": name, "lora_path": str(tmp_path / name)})  # fmt: skip
                assert loaded.status_code == 200, loaded.text
            models = [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]]
            names = ["tiny", "tiny:a", "b", "tiny:b", "a"]
            with ThreadPoolExecutor(len(names)) as pool:
                replies = [r.json() for r in pool.map(lambda m: _call(url, m), names)]
            raw = httpx.post(f"{url}/v1/completions", timeout=60, json={
                "model": "tiny:b", "prompt": replies[3]["prompt_token_ids"], "max_tokens": 6,
                "temperature": 1.0, "seed": 5, "logprobs": 0}).json()  # fmt: skip
            missing = _call(url, "tiny:nope")
            unknown_model = _call(url, "other:a")
            unload = httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "a"})
            after_unload = _call(url, "tiny:a")
        recorded = [t.metadata["gateway"].get("adapters") for t in store.query(run="gw")]
    asyncio.run(policy.close())

    assert models == ["tiny", "a", "b"]
    for name, reply in zip(names, replies, strict=True):
        assert reply["model"] == name
        choice = reply["choices"][0]
        served = torch.tensor([entry["logprob"] for entry in choice["logprobs"]["content"]])
        adapter = name.rpartition(":")[2]
        model = trained.get(adapter, trained["a"])
        with model.disable_adapter() if adapter == "tiny" else contextlib.nullcontext():
            want = _logprobs(model, reply["prompt_token_ids"], choice["token_ids"])
        assert torch.allclose(served, want, atol=TOLERANCE), name
    assert replies[1]["choices"][0]["token_ids"] == replies[4]["choices"][0]["token_ids"]
    # /v1/completions under the same adapter, prompt and seed samples what the chat call did.
    chat_b = [entry["logprob"] for entry in replies[3]["choices"][0]["logprobs"]["content"]]
    assert torch.allclose(
        torch.tensor(raw["choices"][0]["logprobs"]["token_logprobs"]), torch.tensor(chat_b)
    )
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == (
        "adapter 'nope' is not loaded; loaded adapters: a, b"
    )
    assert unknown_model.status_code == 404
    assert "is not served here" in unknown_model.json()["error"]["message"]
    assert unload.status_code == 200
    assert after_unload.status_code == 404
    assert "loaded adapters: b" in after_unload.json()["error"]["message"]
    assert sorted(r[0] for r in recorded if r is not None) == ["a", "a", "b", "b", "b"]
    assert sum(r is None for r in recorded) == 1


def test_serve_lora_modules_are_name_equals_path(tmp_path: Path) -> None:
    assert parse_lora_module(" a = /x/y ") == ("a", "/x/y")
    with pytest.raises(ConfigError, match="--lora-modules: expected NAME=PATH, got 'a'"):
        parse_lora_module("a")
    gateway = Gateway(load_policy("tiny"), None, "gw")
    with pytest.raises(ConfigError, match=r"--lora-modules a=.*no adapter_config\.json"):
        load_adapters(gateway, [("a", str(tmp_path))], "--lora-modules")
    _trained(0, tmp_path / "a")
    load_adapters(gateway, [("a", str(tmp_path / "a"))], "--lora-modules")
    assert gateway.model_names == ("tiny", "a") and gateway.adapter_of("tiny:a") == "a"
