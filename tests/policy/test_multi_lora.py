"""Many LoRA adapters on one base model: a batch mixing rows under different adapters gives
each row what that adapter alone gives, and adapters beyond the memory cap are paged in and
out least recently used first."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model

from trajforge.errors import ConfigError
from trajforge.policy.base import Completion, SamplingParams
from trajforge.policy.engine.adapter_bank import AdapterBank, UnknownAdapter
from trajforge.policy.engine.lora import load_adapter
from trajforge.policy.hf import HFPolicy
from trajforge.policy.models.embedded import load_embedded
from trajforge.policy.models.tiny import tiny_model_and_tokenizer

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=10)
TOLERANCE = 1024 * torch.finfo(torch.float32).eps
"""Log-probabilities agree to 1024 float32 ulps (1.2e-4). A row computes the same fp32
operations whatever its batch neighbours; only the summation order inside a matmul changes with
the batch's shape, a few ulps per operation, over 2 layers and a 49k-entry log-softmax."""

ADAPTERS = {
    "qv": LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    "all": LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"),
    "mlp": LoraConfig(r=2, lora_alpha=4, use_rslora=True, target_modules=["k_proj", "down_proj"]),
}
"""Adapters of different ranks and modules: each fused projection sees a full, a partial and
no adapter."""


def _save(folder: Path, config: LoraConfig, seed: int) -> Path:
    model = get_peft_model(tiny_model_and_tokenizer(seed=0)[0], config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.normal_(0, 0.5, generator=torch.Generator().manual_seed(seed))
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return {
        name: _save(root / name, config, seed)
        for seed, (name, config) in enumerate(ADAPTERS.items())
    }


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    tok = tiny_model_and_tokenizer(seed=0)[1]
    system = "You are a careful assistant who answers in one short sentence. " * 2
    texts = [system + "Hi", system + "What is 2+2?", "x " * 30, "calc 17*23"]
    return [tok.encode(t) for t in texts]


def _policy(folders: dict[str, Path], **kwargs: Any) -> HFPolicy:
    model, tok = tiny_model_and_tokenizer(seed=0)
    policy = HFPolicy(model, tok, **kwargs)
    for name, folder in folders.items():
        policy.add_adapter(name, folder)
    return policy


async def _generate(
    policy: HFPolicy, jobs: list[tuple[list[int], str | None]], together: bool
) -> list[Completion]:
    try:
        if together:
            return list(
                await asyncio.gather(*(policy.generate_with_adapter(a, p, GREEDY) for p, a in jobs))
            )
        return [await policy.generate_with_adapter(a, p, GREEDY) for p, a in jobs]
    finally:
        await policy.close()


def _assert_same(got: list[Completion], want: list[Completion]) -> None:
    for a, b in zip(got, want, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs is not None and b.logprobs is not None
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=TOLERANCE)


def test_a_mixed_batch_matches_each_adapter_alone_and_peft(
    folders: dict[str, Path], prompts: list[list[int]]
) -> None:
    names: list[str | None] = [None, *folders]
    jobs = [(p, a) for p in prompts for a in names]
    mixed = asyncio.run(_generate(_policy(folders), jobs, together=True))
    alone = asyncio.run(_generate(_policy(folders, max_batch_size=1), jobs, together=False))
    _assert_same(mixed, alone)
    tok = tiny_model_and_tokenizer(seed=0)[1]
    for name in folders:
        peft = PeftModel.from_pretrained(tiny_model_and_tokenizer(seed=0)[0], folders[name])
        rows = [k for k, (_, a) in enumerate(jobs) if a == name]
        want = asyncio.run(_generate(HFPolicy(peft, tok), [(jobs[k][0], None) for k in rows], True))
        _assert_same([mixed[k] for k in rows], want)
    base = [c.token_ids for c, (_, a) in zip(mixed, jobs, strict=True) if a is None]
    for name in folders:
        own = [c.token_ids for c, (_, a) in zip(mixed, jobs, strict=True) if a == name]
        assert own != base  # every adapter changes what is sampled


def test_next_turns_reuse_only_their_own_adapters_keys(
    folders: dict[str, Path], prompts: list[list[int]]
) -> None:
    policy = _policy(folders)
    first = asyncio.run(_generate(policy, [(prompts[2], "qv"), (prompts[2], "all")], True))
    follow = [
        (prompts[2] + c.token_ids + prompts[3], a)
        for c, a in zip(first, ["qv", "all"], strict=True)
    ]
    again = asyncio.run(_generate(policy, follow, together=True))
    assert policy.stats.reused_tokens >= 2 * len(prompts[2])
    fresh = asyncio.run(_generate(_policy(folders, prefix_cache_mb=0), follow, together=False))
    _assert_same(again, fresh)


def test_adapters_past_the_cap_are_paged_least_recently_used_first(
    folders: dict[str, Path], prompts: list[list[int]]
) -> None:
    model = tiny_model_and_tokenizer(seed=0)[0]
    size = {n: load_adapter(n, f, model, torch.device("cpu")).nbytes for n, f in folders.items()}
    bank = AdapterBank(
        size["qv"] + size["mlp"] + size["all"] - 1,
        lambda name, folder, key: load_adapter(name, folder, model, torch.device("cpu"), key),
    )
    for name in ("qv", "mlp", "all"):
        bank.register(name, folders[name])
    assert bank.resident() == ["mlp", "all"]  # qv, the least recently used, went
    held = bank.acquire("mlp")
    assert held is not None
    back = bank.acquire("qv")  # all is now the oldest unpinned one
    assert back is not None and bank.resident() == ["mlp", "qv"] and bank.evictions == 2
    assert bank.acquire("all") is None  # mlp and qv are pinned: all waits
    bank.release(back)
    assert bank.acquire("all") is not None and bank.resident() == ["mlp", "all"]
    with pytest.raises(UnknownAdapter, match="loaded adapters: qv, mlp, all"):
        bank.acquire("nope")

    # Through the policy: a cap of one adapter at a time still serves every row exactly.
    jobs = [(p, a) for p in prompts[:2] for a in folders]
    paged = _policy(folders, adapter_cache_mb=size["all"] / 2**20)
    got = asyncio.run(_generate(paged, jobs, together=True))
    _assert_same(got, asyncio.run(_generate(_policy(folders), jobs, together=True)))
    assert paged.adapters.loads > len(folders)


def test_unknown_adapters_and_unsupported_models_are_refused(
    folders: dict[str, Path], prompts: list[list[int]], tmp_path: Path
) -> None:
    policy = _policy({"qv": folders["qv"]})
    with pytest.raises(UnknownAdapter, match="'nope' is not loaded; loaded adapters: qv"):
        asyncio.run(policy.generate_with_adapter("nope", prompts[0], GREEDY))
    with pytest.raises(ConfigError, match=r"no adapter_config\.json"):
        policy.add_adapter("empty", tmp_path)
    policy.remove_adapter("qv")
    with pytest.raises(UnknownAdapter, match="loaded adapters: none"):
        policy.remove_adapter("qv")
    model, tok = tiny_model_and_tokenizer(seed=0)
    with pytest.raises(ConfigError, match="serves no adapters by name"):
        HFPolicy(model, tok, lean_decode=False).add_adapter("qv", folders["qv"])


@pytest.mark.slow
def test_smollm2_mixed_batch_matches_each_adapter_alone(tmp_path: Path) -> None:
    model, tok = load_embedded()
    config = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear")
    wrapped = get_peft_model(model, config)
    folders = {}
    with torch.no_grad():
        for seed in range(3):
            for name, param in wrapped.named_parameters():
                if "lora_" in name:
                    param.normal_(0, 0.05, generator=torch.Generator().manual_seed(seed))
            folders[f"a{seed}"] = tmp_path / f"a{seed}"
            wrapped.save_pretrained(folders[f"a{seed}"])
    base = wrapped.unload()
    questions = ["What is 17 * 23?", "Name a prime number.", "Say hello."]
    prompts = [tok.encode(f"Question: {q}\nAnswer:") for q in questions]
    jobs = [(p, a) for p in prompts for a in [None, *folders]]

    def policy(**kwargs: Any) -> HFPolicy:
        served = HFPolicy(base, tok, **kwargs)
        for name, folder in folders.items():
            served.add_adapter(name, folder)
        return served

    mixed = asyncio.run(_generate(policy(), jobs, together=True))
    alone = asyncio.run(_generate(policy(max_batch_size=1), jobs, together=False))
    _assert_same(mixed, alone)
    base_tokens = [c.token_ids for c, (_, a) in zip(mixed, jobs, strict=True) if a is None]
    for name in folders:
        own = [c.token_ids for c, (_, a) in zip(mixed, jobs, strict=True) if a == name]
        assert own != base_tokens
