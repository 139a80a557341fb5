"""HFPolicy: batched decoding must give exactly what decoding one sequence at a time gives."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from trajforge.errors import ConfigError
from trajforge.policy.base import Completion, FinishReason, SamplingParams
from trajforge.policy.hf import GenerationError, HFPolicy
from trajforge.policy.models.tiny import tiny_model_and_tokenizer

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    return tiny_model_and_tokenizer(seed=0)


@pytest.fixture(scope="module")
def prompts(tiny: tuple[Any, Any]) -> list[list[int]]:
    _, tok = tiny
    texts = ["Hi", "What is 2+2?", "Tell me a long story about " * 4, "x " * 30, "calc 17*23"]
    return [tok.encode(t) for t in texts]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _gather(policy: HFPolicy, prompts: list[list[int]], sampling: SamplingParams) -> list:
    try:
        return await asyncio.gather(*(policy.generate(p, sampling) for p in prompts))
    finally:
        await policy.close()


async def _one_by_one(policy: HFPolicy, prompts: list[list[int]], sampling: SamplingParams) -> list:
    try:
        return [await policy.generate(p, sampling) for p in prompts]
    finally:
        await policy.close()


def test_greedy_batched_equals_one_by_one(tiny: tuple[Any, Any], prompts: list[list[int]]) -> None:
    model, tok = tiny
    batched = run(_gather(HFPolicy(model, tok, max_batch_size=8), prompts, GREEDY))
    single = run(_one_by_one(HFPolicy(model, tok, max_batch_size=1), prompts, GREEDY))
    assert [c.token_ids for c in batched] == [c.token_ids for c in single]
    with torch.inference_mode():
        for prompt, completion in zip(prompts, single, strict=True):
            ref = model.generate(
                torch.tensor([prompt]), max_new_tokens=12, do_sample=False, eos_token_id=None
            )[0, len(prompt) :].tolist()
            assert completion.token_ids == ref[: len(completion.token_ids)]


def test_sequences_joining_a_running_batch_match(
    tiny: tuple[Any, Any], prompts: list[list[int]]
) -> None:
    model, tok = tiny
    policy = HFPolicy(model, tok, max_batch_size=3)

    async def staggered() -> list[Completion]:
        tasks = []
        for prompt in prompts:
            tasks.append(asyncio.create_task(policy.generate(prompt, GREEDY)))
            await asyncio.sleep(0.01)
        try:
            return list(await asyncio.gather(*tasks))
        finally:
            await policy.close()

    joined = run(staggered())
    single = run(_one_by_one(HFPolicy(model, tok, max_batch_size=1), prompts, GREEDY))
    assert [c.token_ids for c in joined] == [c.token_ids for c in single]
    assert policy.stats.max_rows <= 3
    assert policy.stats.prefills >= 2


def test_seeded_sampling_is_reproducible_and_independent_of_the_batch(
    tiny: tuple[Any, Any], prompts: list[list[int]]
) -> None:
    model, tok = tiny
    sampling = SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=16, seed=1234)
    alone = run(_gather(HFPolicy(model, tok), prompts[:1], sampling))[0]
    again = run(_gather(HFPolicy(model, tok), prompts[:1], sampling))[0]
    crowd = run(_gather(HFPolicy(model, tok), [*prompts[2:], prompts[0], *prompts[1:2]], sampling))
    assert alone.token_ids == again.token_ids
    assert crowd[len(prompts) - 2].token_ids == alone.token_ids
    other_seed = SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=16, seed=99)
    assert (
        run(_gather(HFPolicy(model, tok), prompts[:1], other_seed))[0].token_ids != alone.token_ids
    )


def test_stop_strings_eos_and_budgets_are_per_sequence(
    tiny: tuple[Any, Any], prompts: list[list[int]]
) -> None:
    model, tok = tiny
    free = run(_gather(HFPolicy(model, tok), prompts[:1], GREEDY))[0]
    stop = tok.decode(free.token_ids[4:6])
    cut = next(k for k in range(1, 13) if stop in tok.decode(free.token_ids[:k]))
    requests = [
        (prompts[0], SamplingParams(temperature=0.0, max_new_tokens=12, stop=[stop])),
        (prompts[0], SamplingParams(temperature=0.0, max_new_tokens=3)),
        (prompts[1], SamplingParams(temperature=0.0, max_new_tokens=7)),
    ]
    policy = HFPolicy(model, tok)

    async def mixed() -> list[Completion]:
        try:
            return list(await asyncio.gather(*(policy.generate(p, s) for p, s in requests)))
        finally:
            await policy.close()

    stopped, short, medium = run(mixed())
    assert stopped.finish_reason is FinishReason.STOP
    assert stopped.token_ids == free.token_ids[:cut]
    assert stop in stopped.text
    assert (short.finish_reason, short.token_ids) == (FinishReason.LENGTH, free.token_ids[:3])
    assert (medium.finish_reason, len(medium.token_ids)) == (FinishReason.LENGTH, 7)

    eos = free.token_ids[5]
    ended = run(_gather(HFPolicy(model, tok, eos_token_ids=[eos]), prompts[:1], GREEDY))[0]
    first = free.token_ids.index(eos)
    assert ended.finish_reason is FinishReason.STOP
    assert ended.token_ids == free.token_ids[: first + 1]
    assert ended.text == tok.decode(free.token_ids[:first])


def test_logprobs_match_a_full_forward_pass(
    tiny: tuple[Any, Any], prompts: list[list[int]]
) -> None:
    model, tok = tiny
    for temperature in (0.0, 0.7):
        sampling = SamplingParams(temperature=temperature, max_new_tokens=10, seed=5)
        outs = run(_gather(HFPolicy(model, tok), prompts, sampling))
        scale = temperature or 1.0
        for prompt, out in zip(prompts, outs, strict=True):
            assert out.logprobs is not None and len(out.logprobs) == len(out.token_ids)
            with torch.inference_mode():
                logits = model(torch.tensor([prompt + out.token_ids])).logits[0].float()
            logp = torch.log_softmax(logits / scale, dim=-1)
            n = len(prompt)
            expected = [logp[n - 1 + i, t].item() for i, t in enumerate(out.token_ids)]
            assert out.logprobs == pytest.approx(expected, abs=1e-4)


def test_concurrent_calls_are_batched(tiny: tuple[Any, Any], prompts: list[list[int]]) -> None:
    model, tok = tiny
    policy = HFPolicy(model, tok, max_batch_size=16)
    many = [p for p in prompts for _ in range(3)]
    outs = run(_gather(policy, many, GREEDY))
    total = sum(len(o.token_ids) for o in outs)
    stats = policy.stats
    assert stats.generated_tokens == total == 12 * len(many)
    assert stats.max_rows > len(many) // 2
    assert stats.prefills + stats.decode_steps < total // 4


def test_set_weights_changes_outputs_and_waits_for_inflight(
    tiny: tuple[Any, Any], prompts: list[list[int]]
) -> None:
    model, tok = tiny
    other, _ = tiny_model_and_tokenizer(seed=1)
    base = run(_gather(HFPolicy(model, tok), prompts, GREEDY))
    want = run(_gather(HFPolicy(other, tok), prompts, GREEDY))
    assert [c.token_ids for c in base] != [c.token_ids for c in want]

    own, _ = tiny_model_and_tokenizer(seed=0)
    policy = HFPolicy(own, tok)
    long = SamplingParams(temperature=0.0, max_new_tokens=40)
    ref_long = run(_gather(HFPolicy(model, tok), prompts[:1], long))[0]

    async def swap_while_generating() -> tuple[Completion, list[Completion]]:
        task = asyncio.create_task(policy.generate(prompts[0], long))
        while policy.stats.decode_steps < 2:
            await asyncio.sleep(0.001)
        await asyncio.to_thread(policy.set_weights, other)
        after = [await policy.generate(p, GREEDY) for p in prompts]
        await policy.close()
        return await task, after

    inflight, after = run(swap_while_generating())
    assert inflight.token_ids == ref_long.token_ids
    assert [c.token_ids for c in after] == [c.token_ids for c in want]

    policy.set_weights(model.state_dict())
    assert [c.token_ids for c in run(_one_by_one(policy, prompts, GREEDY))] == [
        c.token_ids for c in base
    ]
    with pytest.raises(ConfigError, match="missing"):
        policy.set_weights({"lm_head.weight": torch.zeros(3)})


def test_load_adapter_applies_lora(
    tiny: tuple[Any, Any], prompts: list[list[int]], tmp_path: Path
) -> None:
    from peft import LoraConfig, PeftModel, get_peft_model

    model, tok = tiny
    folders = []
    for k in range(2):
        lora = get_peft_model(
            tiny_model_and_tokenizer(seed=0)[0],
            LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"]),
        )
        with torch.no_grad():
            for name, param in lora.named_parameters():
                if "lora_B" in name:
                    param.normal_(0, 2.0, generator=torch.Generator().manual_seed(k))
        folders.append(tmp_path / f"adapter{k}")
        lora.save_pretrained(folders[-1])

    policy = HFPolicy(tiny_model_and_tokenizer(seed=0)[0], tok)
    base = run(_gather(HFPolicy(model, tok), prompts, GREEDY))
    for folder in folders:
        policy.load_adapter(folder)
        got = run(_gather(policy, prompts, GREEDY))
        expected_model = PeftModel.from_pretrained(tiny_model_and_tokenizer(seed=0)[0], folder)
        want = run(_gather(HFPolicy(expected_model, tok), prompts, GREEDY))
        assert [c.token_ids for c in got] == [c.token_ids for c in want]
        assert [c.token_ids for c in got] != [c.token_ids for c in base]
    policy.set_weights(model.state_dict())
    assert [c.token_ids for c in run(_gather(policy, prompts, GREEDY))] == [
        c.token_ids for c in base
    ]
    with pytest.raises(ConfigError, match=r"adapter_config\.json"):
        policy.load_adapter(tmp_path)


def test_cancelled_requests_leave_the_batch(
    tiny: tuple[Any, Any], prompts: list[list[int]]
) -> None:
    model, tok = tiny
    policy = HFPolicy(model, tok)

    async def cancel_one() -> Completion:
        doomed = asyncio.create_task(
            policy.generate(prompts[0], SamplingParams(temperature=0.0, max_new_tokens=4000))
        )
        kept = asyncio.create_task(policy.generate(prompts[1], GREEDY))
        while policy.stats.decode_steps < 2:
            await asyncio.sleep(0.001)
        doomed.cancel()
        result = await kept
        await policy.close()
        return result

    result = run(cancel_one())
    assert len(result.token_ids) == 12
    assert policy.stats.generated_tokens < 200


def test_errors_and_training_mode(tiny: tuple[Any, Any], prompts: list[list[int]]) -> None:
    model, tok = tiny
    policy = HFPolicy(model, tok, max_context_tokens=20)
    with pytest.raises(GenerationError, match="context holds 20"):
        run(policy.generate(list(range(1, 30)), GREEDY))
    with pytest.raises(GenerationError, match="no token ids"):
        run(policy.generate([], GREEDY))
    with pytest.raises(GenerationError, match=r"token id 49152 is outside"):
        run(policy.generate([1, 49152], GREEDY))
    with pytest.raises(ConfigError, match="top_p"):
        run(policy.generate(prompts[0], SamplingParams(top_p=0.0)))
    with pytest.raises(ConfigError, match="max_batch_size"):
        HFPolicy(model, tok, max_batch_size=0)
    clipped = run(_gather(policy, [prompts[1]], SamplingParams(temperature=0, max_new_tokens=50)))
    assert len(prompts[1]) + len(clipped[0].token_ids) == 20

    # The transformers forward (the lean one has no module calls to hook) runs in eval mode.
    model.train()
    seen: list[bool] = []
    hook = model.register_forward_pre_hook(lambda module, args: seen.append(module.training))
    try:
        run(_gather(HFPolicy(model, tok, lean_decode=False), prompts[:2], GREEDY))
    finally:
        hook.remove()
    assert seen and not any(seen)
    assert model.training
    model.eval()


def test_generation_runs_off_the_event_loop(
    tiny: tuple[Any, Any], prompts: list[list[int]]
) -> None:
    model, tok = tiny
    policy = HFPolicy(model, tok, lean_decode=False)  # module hooks see the transformers forward
    threads: set[int] = set()
    hook = model.register_forward_pre_hook(lambda *_: threads.add(threading.get_ident()))

    async def tick_while_generating() -> int:
        ticks = 0
        task = asyncio.create_task(
            policy.generate(prompts[2], SamplingParams(temperature=0, max_new_tokens=60))
        )
        while not task.done():
            ticks += 1
            await asyncio.sleep(0)
        await policy.close()
        return ticks

    try:
        ticks = run(tick_while_generating())
    finally:
        hook.remove()
    assert threading.get_ident() not in threads
    assert ticks > 10


def test_respond_keeps_the_sampled_ids(tiny: tuple[Any, Any]) -> None:
    from trajforge.schema import Message, Role

    model, tok = tiny
    policy = HFPolicy(model, tok)
    opening = [Message(role=Role.USER, content="What is 2+2?")]

    async def one_turn() -> tuple[Any, Message]:
        session = policy.start_session(opening, [])
        try:
            return session, await policy.respond(session, GREEDY, turn=0)
        finally:
            await policy.close()

    session, reply = run(one_turn())
    prompt = session.messages[0].token_ids
    direct = run(_gather(HFPolicy(model, tok), [prompt], GREEDY))[0]
    assert reply.token_ids == direct.token_ids
    assert reply.logprobs == pytest.approx(direct.logprobs)
    assert session.messages[-1] is reply


@pytest.mark.slow
def test_smollm2_batched_greedy_equals_one_by_one() -> None:
    from trajforge.policy.models.embedded import load_embedded

    model, tok = load_embedded()
    questions = ["What is 17 * 23?", "Name three colours.", "Say hello in French, briefly."]
    prompts = [
        tok.encode(
            tok.apply_chat_template(
                [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False
            ),
            add_special_tokens=False,
        )
        for q in questions
    ]
    sampling = SamplingParams(temperature=0.0, max_new_tokens=16)
    batched = run(_gather(HFPolicy(model, tok), prompts, sampling))
    single = run(_one_by_one(HFPolicy(model, tok, max_batch_size=1), prompts, sampling))
    assert [c.token_ids for c in batched] == [c.token_ids for c in single]
    assert all(c.text.strip() for c in batched)
