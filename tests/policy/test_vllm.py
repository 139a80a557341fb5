"""``vllm:`` policies against a real vLLM server (the CPU build in ``make setup``'s
``.venv-vllm``), one per test session: SmolLM2 in float32 (vLLM's CPU attention takes head
sizes of 32 and up, the tiny model's are 16). Skipped with the reason where no vLLM is here."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from peft import LoraConfig, get_peft_model

from trajforge.errors import ConfigError
from trajforge.policy.base import Completion, SamplingParams
from trajforge.policy.check import check_trajectory
from trajforge.policy.models.embedded import load_embedded
from trajforge.policy.naming import load_policy
from trajforge.policy.vllm import VLLMPolicy
from trajforge.policy.vllm_server import vllm_python
from trajforge.rollout import Limits, RolloutSpec, run_rollout
from trajforge.schema import Fault, OutcomeStatus, Role
from trajforge.serve.gateway import Gateway
from trajforge.serve.server import serving
from trajforge.server_process import group_alive
from trajforge.store import TrajectoryStore

pytestmark = pytest.mark.slow

PROMPT = "<|im_start|>user\nName three colours and say why you like them.<|im_end|>\n<|im_start|>assistant\n"
LOGPROB_TOLERANCE = 2e-3
"""fp32 on both sides; vLLM's CPU kernels sum in another order than torch's eager forward."""
REQUEST = {"messages": [{"role": "user", "content": "Hello there, how are you?"}],
           "max_tokens": 6, "temperature": 1.0, "seed": 5}  # fmt: skip


def _vllm_or_skip() -> None:
    try:
        vllm_python()
    except ConfigError as exc:
        pytest.skip(str(exc))


def _group_gone(pgid: int) -> bool:
    return not group_alive(pgid)


@pytest.fixture(scope="session")
def vllm_policy() -> Iterator[VLLMPolicy]:
    _vllm_or_skip()
    policy = load_policy("vllm:embedded", dtype=torch.float32)
    assert isinstance(policy, VLLMPolicy)
    groups: list[int] = []
    yield policy
    if policy.server is not None and policy.server.pid is not None:
        groups.append(policy.server.pid)
    asyncio.run(policy.close())
    assert policy.server is not None and not policy.server.running
    assert all(_group_gone(g) for g in groups), "a vLLM process outlived close()"


@pytest.fixture(scope="session")
def smol() -> tuple[torch.nn.Module, object]:
    return load_embedded(torch.float32)


def _prompt_ids(policy: VLLMPolicy) -> list[int]:
    return list(policy.tokenizer(PROMPT, add_special_tokens=False)["input_ids"])


def _forward_logprobs(
    model: torch.nn.Module, prompt: list[int], sampled: list[int]
) -> torch.Tensor:
    """trajforge's side: the sampled tokens' logprobs under ``model``, one eager forward."""
    ids = torch.tensor([prompt + sampled])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(sampled)[:, None])[:, 0]


def _generate(
    policy: VLLMPolicy, prompt: list[int], temperature: float, max_new_tokens: int = 24
) -> Completion:
    params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=7)
    return asyncio.run(policy.generate(prompt, params))


def test_a_rollout_on_the_calculator_is_token_exact(vllm_policy: VLLMPolicy) -> None:
    spec = RolloutSpec(
        env="calculator",
        tasks={"count": 2},
        limits=Limits(max_turns=2, max_new_tokens=48),
        seed=3,
    )
    trajs = run_rollout(spec, policy=vllm_policy)
    assert len(trajs) == 2
    for traj in trajs:
        assert traj.outcome.status is not OutcomeStatus.ERROR, traj.outcome
        assert traj.metadata["precision"] == "fp32"
        sampled = [m for m in traj.messages if m.role is Role.ASSISTANT]
        assert sampled and all(m.token_ids and m.logprobs for m in sampled)
        assert check_trajectory(traj, vllm_policy.tokenizer) == []


def test_logprobs_match_trajforges_forward_of_the_same_weights(
    vllm_policy: VLLMPolicy, smol: tuple[torch.nn.Module, object]
) -> None:
    prompt = _prompt_ids(vllm_policy)
    completion = _generate(vllm_policy, prompt, 1.0)
    assert completion.token_ids and completion.logprobs is not None
    ours = _forward_logprobs(smol[0], prompt, completion.token_ids)
    theirs = torch.tensor(completion.logprobs)
    gap = (ours - theirs).abs().max().item()
    assert gap < LOGPROB_TOLERANCE, (gap, ours.tolist(), theirs.tolist())


def test_a_running_server_is_reached_by_its_url(vllm_policy: VLLMPolicy) -> None:
    assert vllm_policy.server is not None
    url = vllm_policy.server.url
    connected = load_policy(f"vllm:{url}")
    assert isinstance(connected, VLLMPolicy) and connected.server is None
    prompt = _prompt_ids(vllm_policy)
    ours = _generate(connected, prompt, 0.0)
    theirs = _generate(vllm_policy, prompt, 0.0)
    assert ours.token_ids == theirs.token_ids
    asyncio.run(connected.close())
    assert vllm_policy.server.running


def _train_adapter(
    model: torch.nn.Module, prompt: list[int], target: list[int], folder: Path
) -> Any:
    """One optimiser step of a LoRA adapter toward ``target`` (from a random start: PEFT's
    default zero start moves too little in one step to change greedy decoding), saved in
    ``folder``."""
    config = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        peft = get_peft_model(model, config)
    optim = torch.optim.Adam([p for p in peft.parameters() if p.requires_grad], lr=1e-2)
    logits = peft(input_ids=torch.tensor([prompt + target])).logits[0, len(prompt) - 1 : -1]
    torch.nn.functional.cross_entropy(logits, torch.tensor(target)).backward()
    optim.step()
    peft.eval()
    peft.save_pretrained(str(folder))
    return peft


def _chat(url: str, model: str) -> dict[str, Any]:
    reply = httpx.post(f"{url}/v1/chat/completions", json={**REQUEST, "model": model}, timeout=300)
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def test_a_lora_adapter_after_a_training_step_is_what_is_sampled_next(
    vllm_policy: VLLMPolicy, tmp_path: Path
) -> None:
    prompt = _prompt_ids(vllm_policy)
    before = _generate(vllm_policy, prompt, 0.0)
    start = vllm_policy.weights_version
    assert before.weights_version == start
    target = vllm_policy.tokenizer("Blue, green and purple.", add_special_tokens=False)
    model, _ = load_embedded(torch.float32)
    trained = _train_adapter(model, prompt, target["input_ids"], tmp_path / "step-1")

    # The trainer's path (M2.9): vLLM's adapter endpoints on trajforge's gateway, in front of
    # the vLLM policy, which forwards them to the vLLM server.
    with TrajectoryStore(tmp_path / "gw.db") as store:
        gateway = Gateway(vllm_policy, store, "gw")
        with serving(gateway) as url:
            base_name = vllm_policy.name
            _chat(url, base_name)
            loaded = httpx.post(f"{url}/v1/load_lora_adapter",
                                json={"lora_name": "step-1", "lora_path": str(tmp_path / "step-1")},
                                timeout=300)  # fmt: skip
            assert loaded.status_code == 200, loaded.text
            assert vllm_policy.weights_version == start + 1
            after = _generate(vllm_policy, prompt, 0.0)
            _chat(url, "step-1")
            unloaded = httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "step-1"})
            assert unloaded.status_code == 200, unloaded.text
            _chat(url, base_name)
        versions = sorted(
            t.metadata["gateway"]["weights_versions"][0] for t in store.query(run="gw")
        )
    assert versions == [start, start + 1, start + 2]
    assert after.weights_version == start + 1
    assert after.token_ids != before.token_ids
    # vLLM applied exactly the trained adapter: its logprobs are the PEFT model's.
    gap = _forward_logprobs(trained, prompt, after.token_ids) - torch.tensor(after.logprobs)
    assert gap.abs().max().item() < LOGPROB_TOLERANCE
    again = _generate(vllm_policy, prompt, 0.0)
    assert again.token_ids == before.token_ids and again.weights_version == start + 2


def _server_child(pgid: int) -> int:
    """The vLLM API server's pid: the watchdog's child."""
    out = subprocess.run(["pgrep", "-P", str(pgid)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def test_a_killed_server_fails_the_running_episode_and_is_restarted(
    vllm_policy: VLLMPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = vllm_policy.server
    assert server is not None and server.pid is not None
    first_group, starts = server.pid, server.starts
    # The server is frozen while the episode's call goes out, then its API process is killed:
    # the call is under way when the server dies, whatever the sampled text.
    sent = threading.Event()
    generate = vllm_policy.client.generate

    async def signalling(*args: Any, **kwargs: Any) -> Completion:
        sent.set()
        return await generate(*args, **kwargs)

    monkeypatch.setattr(vllm_policy.client, "generate", signalling)
    os.killpg(first_group, signal.SIGSTOP)
    spec = RolloutSpec(env="calculator", tasks={"count": 1}, limits=Limits(max_turns=1))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        episode = pool.submit(run_rollout, spec, policy=vllm_policy)
        assert sent.wait(60)
        time.sleep(0.5)
        os.kill(_server_child(first_group), signal.SIGKILL)
        os.killpg(first_group, signal.SIGCONT)
        [traj] = episode.result(timeout=120)
    assert traj.outcome.status is OutcomeStatus.ERROR and traj.outcome.fault is Fault.INFRA
    assert "exited with status" in str(traj.outcome.error), traj.outcome
    assert "its stderr ends:" in str(traj.outcome.error)
    assert _group_gone(first_group)  # what the dead server left went with it

    # The next call starts the server again and samples as before.
    again = _generate(vllm_policy, _prompt_ids(vllm_policy), 0.0)
    assert server.starts == starts + 1 and server.running and server.pid != first_group
    assert again.token_ids
