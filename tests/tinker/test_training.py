"""The tinker SDK drives trajforge's Tinker server: supervised learning, RL, checkpoints, and
agreement with trajforge's in-process training."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import tinker
from tinker import types
from trajforge.tinker.service import TinkerService
from trajforge.tinker.trainer import LoraSpec, build_lora_model
from trajforge.train.config import OptimSettings
from trajforge.train.logprobs import token_logprobs
from trajforge.train.model import make_optimizer

pytestmark = pytest.mark.slow

SEQ = list(range(100, 124))


def sft_datum(tokens: list[int]) -> types.Datum:
    n = len(tokens) - 1
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": np.array(tokens[1:], dtype=np.int64),
            "weights": np.ones(n, dtype=np.float32),
        },
    )


def test_a_supervised_loop_lowers_the_loss_and_logs_it(
    client: tinker.ServiceClient, served: tuple[str, TinkerService]
) -> None:
    trainer = client.create_lora_training_client(base_model="tiny", rank=8, seed=0).result()
    info = trainer.get_info()
    assert (info.model_data.model_name, info.lora_rank) == ("tiny", 8)
    data = [sft_datum(SEQ), sft_datum(SEQ[4:])]
    losses = []
    for _ in range(8):
        out = trainer.forward_backward(data, "cross_entropy").result()
        trainer.optim_step(types.AdamParams(learning_rate=5e-3)).result()
        losses.append(out.metrics["loss:sum"])
        assert [o["logprobs"].shape for o in out.loss_fn_outputs] == [[23], [19]]
    assert losses[-1] < 0.8 * losses[0], losses
    # The tokenizer loads offline from the folder the server names.
    assert trainer.get_tokenizer().decode(SEQ[:3])
    _, service = served
    metrics = service.root / "runs" / info.model_id.replace(":", "-") / "metrics.jsonl"
    logged = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in logged] == list(range(1, 9))
    assert [r["loss"] for r in logged] == pytest.approx(losses)
    assert all(r["datums"] == 2 and r["tokens"] == 23 + 19 for r in logged)


def reward(tokens: list[int]) -> float:
    """The share of tokens from the lower half of the vocabulary (about 0.5 at random)."""
    return sum(t < 49152 // 2 for t in tokens) / max(len(tokens), 1)


def test_an_rl_loop_raises_the_reward(
    client: tinker.ServiceClient, served: tuple[str, TinkerService]
) -> None:
    """Sample -> reward -> importance_sampling, the REINFORCE of Tinker's cookbook."""
    trainer = client.create_lora_training_client(base_model="tiny", rank=8, seed=1).result()
    prompt = types.ModelInput.from_ints(SEQ[:4])
    params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=0)
    means = []
    for step in range(12):
        sampler = trainer.save_weights_and_get_sampling_client().result()
        seqs = sampler.sample(prompt, 8, params.model_copy(update={"seed": step})).result()
        rewards = [reward(s.tokens) for s in seqs.sequences]
        means.append(float(np.mean(rewards)))
        baseline = float(np.mean(rewards))
        data = []
        for seq, r in zip(seqs.sequences, rewards, strict=True):
            tokens = prompt.to_ints() + seq.tokens
            n = len(tokens) - 1
            prompt_part = len(prompt.to_ints()) - 1
            data.append(
                types.Datum(
                    model_input=types.ModelInput.from_ints(tokens[:-1]),
                    loss_fn_inputs={
                        "target_tokens": np.array(tokens[1:], dtype=np.int64),
                        "logprobs": np.array([0.0] * prompt_part + seq.logprobs, np.float32),
                        "advantages": np.array(
                            [0.0] * prompt_part + [r - baseline] * len(seq.tokens),
                            np.float32,
                        ),
                    },
                )
            )
            assert n == len(data[-1].loss_fn_inputs["target_tokens"].data)
        trainer.forward_backward(data, "importance_sampling").result()
        trainer.optim_step(types.AdamParams(learning_rate=3e-2)).result()
    assert np.mean(means[-3:]) > np.mean(means[:3]) + 0.2, means
    # Every sample is a token-exact trajectory of its sampler's run, weights version recorded.
    _, service = served
    store = service.store
    assert store is not None
    last = service.samplers[list(service.samplers)[-1]]
    stored = store.query(run=last.run_id)
    assert len(stored) == 8
    assert stored[0].metadata["tinker"]["weights_version"] == 11
    assert stored[0].messages[0].token_ids == SEQ[:4]
    assert all(t.messages[1].logprobs for t in stored)


def test_save_and_load_state_resume_exactly(
    client: tinker.ServiceClient, served: tuple[str, TinkerService]
) -> None:
    trainer = client.create_lora_training_client(base_model="tiny", rank=4, seed=2).result()
    data = [sft_datum(SEQ)]
    adam = types.AdamParams(learning_rate=1e-2)
    trainer.forward_backward(data, "cross_entropy").result()
    trainer.optim_step(adam).result()
    path = trainer.save_state("mid").result().path
    assert path.endswith("/weights/mid")

    def two_more(client_: tinker.TrainingClient) -> list[float]:
        out = []
        for _ in range(2):
            out.append(client_.forward_backward(data, "cross_entropy").result().metrics["loss:sum"])
            client_.optim_step(adam).result()
        return out

    first = two_more(trainer)
    trainer.load_state_with_optimizer(path).result()
    assert two_more(trainer) == first
    resumed = client.create_training_client_from_state_with_optimizer(path).result()
    assert two_more(resumed) == first
    rest = tinker.RestClient(base_url=served[0], api_key="tml-local")
    listed = rest.list_checkpoints(trainer.get_info().model_id).result()
    assert [c.tinker_path for c in listed.checkpoints] == [path]


def test_sampler_weights_sample_like_the_trained_model(client: tinker.ServiceClient) -> None:
    trainer = client.create_lora_training_client(base_model="tiny", rank=4, seed=3).result()
    trainer.forward_backward([sft_datum(SEQ)], "cross_entropy").result()
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    path = trainer.save_weights_for_sampler("s1").result().path
    from_path = client.create_sampling_client(model_path=path).result()
    direct = trainer.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(SEQ[:8])
    a = from_path.compute_logprobs(prompt).result()
    b = direct.compute_logprobs(prompt).result()
    fwd = trainer.forward([sft_datum(SEQ[:8])], "cross_entropy").result()
    assert a[0] is None and a == b
    np.testing.assert_allclose(a[1:], fwd.loss_fn_outputs[0]["logprobs"].tolist(), atol=1e-5)
    params = types.SamplingParams(max_tokens=5, seed=7, stop=[SEQ[9]])
    x = from_path.sample(prompt, 2, params).result().sequences
    y = direct.sample(prompt, 2, params).result().sequences
    assert [s.tokens for s in x] == [s.tokens for s in y]
    assert all(len(s.tokens) == len(s.logprobs or []) <= 5 for s in x)


def test_api_steps_equal_in_process_training(
    client: tinker.ServiceClient, served: tuple[str, TinkerService]
) -> None:
    """A forward_backward + optim_step through the API gives the parameters trajforge's own
    functions give in process (token_logprobs, AdamW), to 1e-6 in fp32."""
    lora = LoraSpec(rank=4, seed=5)
    trainer = client.create_lora_training_client(base_model="tiny", rank=4, seed=5).result()
    weights = np.linspace(0.5, 1.5, len(SEQ) - 1).astype(np.float32)
    datum = sft_datum(SEQ)
    datum.loss_fn_inputs["weights"] = types.TensorData.from_numpy(weights)
    adam = types.AdamParams(learning_rate=1e-2, beta1=0.9, beta2=0.95, eps=1e-8)
    for _ in range(2):
        trainer.forward_backward([datum], "cross_entropy").result()
        trainer.optim_step(adam).result()
    _, service = served
    api_state = service.training[trainer.get_info().model_id].trainable_state()

    model, _ = build_lora_model("tiny", lora)
    model.train()
    optim = make_optimizer(model, OptimSettings(lr=1e-2, betas=(0.9, 0.95), eps=1e-8), fused=False)
    ids = torch.tensor([SEQ])
    mask = torch.ones_like(ids)
    for _ in range(2):
        lp = token_logprobs(model, ids, mask, mask).logprobs[0, 1:]
        (-(lp * torch.from_numpy(weights)).sum()).backward()
        optim.step()
        optim.zero_grad()
    local = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    assert sorted(local) == sorted(api_state)
    moved = 0.0
    for name, value in local.items():
        torch.testing.assert_close(api_state[name], value, atol=1e-6, rtol=0)
        moved = max(moved, float(value.abs().max()))
    assert moved > 0


def test_forward_backward_custom_trains_like_the_built_in_loss(
    client: tinker.ServiceClient,
) -> None:
    """The SDK runs a custom loss as a forward and a weighted cross entropy; a custom loss equal
    to cross entropy moves the weights as the built-in one does."""

    def nll(
        data: list[types.Datum], logprobs: list[torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        return -sum(lp.sum() for lp in logprobs), {}  # type: ignore[return-value]

    custom = client.create_lora_training_client(base_model="tiny", rank=4, seed=6).result()
    built_in = client.create_lora_training_client(base_model="tiny", rank=4, seed=6).result()
    data = [sft_datum(SEQ)]
    adam = types.AdamParams(learning_rate=1e-2)
    out = custom.forward_backward_custom(data, nll).result()
    custom.optim_step(adam).result()
    ref = built_in.forward_backward(data, "cross_entropy").result()
    built_in.optim_step(adam).result()
    assert out.metrics["loss:sum"] == pytest.approx(ref.metrics["loss:sum"], rel=1e-5)
    probe = types.ModelInput.from_ints(SEQ)
    a = custom.save_weights_and_get_sampling_client().result().compute_logprobs(probe).result()
    b = built_in.save_weights_and_get_sampling_client().result().compute_logprobs(probe).result()
    np.testing.assert_allclose(a[1:], b[1:], atol=1e-5)
