"""Token logprobs at a sampling temperature are those of the tempered distribution."""

from __future__ import annotations

import torch

from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.train.logprobs import TokenLogprobModel, logprobs_from_logits


def test_tempered_logprobs_match_the_full_logits_path() -> None:
    model, _ = tiny_model_and_tokenizer(seed=1)
    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (2, 7))
    attention = torch.ones_like(ids)
    mask = torch.zeros_like(ids)
    mask[:, 4:] = 1
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention).logits
        for temperature in (1.0, 0.6):
            lp, _ = TokenLogprobModel(model)(ids, attention, mask, False, temperature)
            expected = logprobs_from_logits(logits / temperature, ids, mask)
            assert torch.allclose(lp, expected, atol=1e-5)
    assert not torch.allclose(
        TokenLogprobModel(model)(ids, attention, mask, False, 0.6)[0],
        TokenLogprobModel(model)(ids, attention, mask)[0],
    )
