"""Weights that follow a trainer: a LoRA adapter loaded through vLLM's endpoint
(``/v1/load_lora_adapter``) is what the gateway samples from next, exactly."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import torch
from peft import LoraConfig, get_peft_model

from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.policy.naming import load_policy
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving
from trajforge.store import TrajectoryStore

REQUEST = {"messages": [{"role": "user", "content": "Hello there, how are you?"}],
           "max_tokens": 6, "temperature": 1.0, "seed": 5, "logprobs": True,
           "return_token_ids": True}  # fmt: skip


def _served(url: str, model: str) -> tuple[list[int], list[int], list[float]]:
    reply = httpx.post(f"{url}/v1/chat/completions", json={**REQUEST, "model": model}).json()
    choice = reply["choices"][0]
    logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
    return reply["prompt_token_ids"], choice["token_ids"], logprobs


def _trainer_logprobs(model: Any, prompt: list[int], sampled: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + sampled])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return torch.stack([logprobs[len(prompt) - 1 + k, t] for k, t in enumerate(sampled)])


def test_served_logprobs_follow_a_loaded_adapter(tmp_path: Path) -> None:
    base, _ = tiny_model_and_tokenizer(seed=0)  # the served policy's weights (seed 0)
    trained = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                              target_modules=["q_proj", "v_proj"]))  # fmt: skip
    trained.save_pretrained(tmp_path / "step-1")
    policy = load_policy("tiny")
    with TrajectoryStore(tmp_path / "gw.db") as store:
        gateway = Gateway(policy, store, "gw")
        with serving(gateway) as url:
            before = _served(url, "tiny")
            loaded = httpx.post(f"{url}/v1/load_lora_adapter",
                                json={"lora_name": "step-1", "lora_path": str(tmp_path / "step-1")})  # fmt: skip
            assert loaded.status_code == 200, loaded.text
            prompt, sampled, served = _served(url, "step-1")
            assert [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]] == [
                "tiny",
                "step-1",
            ]
            missing = httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "nope"})
            assert missing.status_code == 404
            assert (
                httpx.post(
                    f"{url}/v1/unload_lora_adapter", json={"lora_name": "step-1"}
                ).status_code
                == 200
            )
            after_unload = _served(url, "tiny")
        versions = sorted(
            t.metadata["gateway"]["weights_versions"][0] for t in store.query(run="gw")
        )
    asyncio.run(policy.close())
    assert versions == [0, 1, 2]
    trainer = _trainer_logprobs(trained, prompt, sampled)
    assert torch.allclose(torch.tensor(served), trainer, atol=1e-4)
    with trained.disable_adapter():
        old = _trainer_logprobs(trained, prompt, sampled)
        assert torch.allclose(
            torch.tensor(before[2]), _trainer_logprobs(trained, before[0], before[1]), atol=1e-4
        )
    assert (old - trainer).abs().max() > 1e-3  # the adapter changed what is served
    assert after_unload == before  # back on the base weights, the same sample
