"""SFTTrainer on the tiny model: the loss goes down, masks hold, gradients ignore masked targets."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from train_helpers import qa_trajectory

from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.schema.trajectory import LOSS_FROM_MESSAGE
from trajforge.train.batch import TokenBatch, encode_trajectory
from trajforge.train.config import LoraSettings, ModelSettings, OptimSettings, SFTConfig
from trajforge.train.logprobs import TokenLogprobModel, logprobs_from_logits
from trajforge.train.sft import SFTTrainer, observations_too


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    return tiny_model_and_tokenizer()[1]


def _data(tok):  # type: ignore[no-untyped-def]
    return [
        qa_trajectory(
            tok, f"What is {a} plus {b}?", f"The answer is {a + b}.", tool_result=f"{a + b}"
        )
        for a, b in [(1, 2), (3, 4), (5, 6), (7, 8)]
    ]


def _cfg(tmp_path: Path, **kw) -> SFTConfig:  # type: ignore[no-untyped-def]
    base = {
        "output_dir": tmp_path,
        "optim": OptimSettings(lr=1e-2, max_grad_norm=1.0),
        "batch_size": 4,
        "epochs": 12,
        "micro_batch_tokens": 256,
        "tensorboard": False,
        "progress": False,
    }
    base.update(kw)
    return SFTConfig(**base)


def test_sft_lowers_loss_on_tiny(tmp_path: Path, tok) -> None:  # type: ignore[no-untyped-def]
    trainer = SFTTrainer(_cfg(tmp_path), _data(tok))
    result = trainer.train()
    losses = [h["loss"] for h in result.history]
    assert len(losses) == 12
    assert losses[-1] < 0.6 * losses[0]
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 12
    assert all(h["micro_batches"] >= 2 for h in result.history)  # accumulation happened
    assert (tmp_path / "final" / "config.json").exists()


def test_sft_with_lora_trains_only_the_adapter(tmp_path: Path, tok) -> None:  # type: ignore[no-untyped-def]
    cfg = _cfg(
        tmp_path, epochs=4, model=ModelSettings(spec="tiny", lora=LoraSettings(r=4, alpha=8))
    )
    trainer = SFTTrainer(cfg, _data(tok))
    before = {n: p.detach().clone() for n, p in trainer.parts.model.named_parameters()}
    result = trainer.train()
    changed = {
        n for n, p in trainer.parts.model.named_parameters() if not torch.equal(p, before[n])
    }
    assert changed and all("lora_" in n for n in changed)
    assert result.history[-1]["loss"] < result.history[0]["loss"]
    assert (tmp_path / "final" / "adapter" / "adapter_config.json").exists()
    # The final folder itself holds the merged weights, loadable without PEFT, and they compute
    # what the adapted model computes.
    assert not (tmp_path / "final" / "adapter_config.json").exists()
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "final").eval()
    adapted = trainer.parts.model.eval()
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        torch.testing.assert_close(
            merged(ids).logits, adapted(input_ids=ids).logits, atol=1e-4, rtol=1e-4
        )


def test_selected_head_path_equals_full_logits(tok) -> None:  # type: ignore[no-untyped-def]
    model, _ = tiny_model_and_tokenizer()
    b = TokenBatch.from_trajectories(_data(tok)[:2], pad_token_id=tok.pad_token_id)
    lp, _ = TokenLogprobModel(model)(b.input_ids, b.attention_mask, b.loss_mask)
    full = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
    ref = logprobs_from_logits(full, b.input_ids, b.loss_mask)
    assert torch.allclose(lp, ref, atol=1e-5)
    assert (lp[~b.loss_mask] == 0).all() and (lp[b.loss_mask] < 0).all()


def test_masked_targets_change_no_gradient(tok) -> None:  # type: ignore[no-untyped-def]
    """Loss gradient w.r.t. logits is exactly zero at positions predicting masked tokens, and
    changing masked target tokens (trailing template tokens, tool-result tokens' own targets as
    seen from the last position) leaves every parameter gradient unchanged."""
    model, _ = tiny_model_and_tokenizer()
    traj = _data(tok)[0]
    b = TokenBatch.from_trajectories([traj])

    # 1) d loss / d logits is exactly zero where the predicted token is not a loss token.
    logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits.detach()
    logits.requires_grad_(True)
    loss = -logprobs_from_logits(logits, b.input_ids, b.loss_mask).sum()
    loss.backward()
    assert logits.grad is not None
    predicts_loss = torch.zeros_like(b.loss_mask)
    predicts_loss[:, :-1] = b.loss_mask[:, 1:]
    assert (logits.grad[~predicts_loss] == 0).all()
    assert (logits.grad[predicts_loss].abs().sum(-1) > 0).all()

    # 2) Appending / changing tokens after the last assistant token changes no gradient.
    def grads(ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        model.zero_grad()
        lp, _ = TokenLogprobModel(model)(ids, torch.ones_like(ids), mask)
        (-lp.sum()).backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    ids = torch.cat([b.input_ids, torch.tensor([[11, 12, 13]])], dim=1)
    mask = torch.cat([b.loss_mask, torch.zeros((1, 3), dtype=torch.bool)], dim=1)
    g1 = grads(ids, mask)
    ids2 = ids.clone()
    ids2[0, -3:] = torch.tensor([4000, 5000, 6000])
    g2 = grads(ids2, mask)
    assert all(torch.equal(a, c) for a, c in zip(g1, g2, strict=True))
    # Sanity: changing an assistant (loss) token does change the gradient.
    ids3 = ids.clone()
    last_loss = int(mask[0].nonzero()[-1])
    ids3[0, last_loss] = 4242
    g3 = grads(ids3, mask)
    assert not all(torch.equal(a, c) for a, c in zip(g1, g3, strict=True))


def test_loss_on_all_learns_the_observations_too(tmp_path: Path, tok) -> None:  # type: ignore[no-untyped-def]
    data = _data(tok)
    assistant = SFTTrainer(_cfg(tmp_path / "a", epochs=1), data)
    everything = SFTTrainer(_cfg(tmp_path / "b", epochs=1, loss_on="all"), data)
    for moves, whole in zip(assistant.seqs, everything.seqs, strict=True):
        # Every token but the first is learned; the assistant's tokens in both.
        assert whole.loss_mask == [False] + [True] * (len(whole) - 1)
        assert all(w for m, w in zip(moves.loss_mask, whole.loss_mask, strict=True) if m)
        assert sum(moves.loss_mask) < sum(whole.loss_mask)


def test_loss_on_all_keeps_context_only_assistant_turns_out(tok) -> None:  # type: ignore[no-untyped-def]
    traj = _data(tok)[0]
    # The tool call (message 2) is context only, as a repair's failed prefix is.
    traj.metadata[LOSS_FROM_MESSAGE] = 3
    seq = encode_trajectory(traj)
    mask = observations_too(seq)
    call = [i for i, turn in enumerate(seq.turn_index) if turn == 0]
    assert call and not any(mask[i] for i in call)
    assert all(mask[i] for i, turn in enumerate(seq.turn_index) if turn < 0 and i > 0)
