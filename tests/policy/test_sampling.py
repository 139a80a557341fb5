"""Token sampling: the two-level CDF search draws from the right distribution, per row."""

from __future__ import annotations

import pytest
import torch

from trajforge.policy import sampling
from trajforge.policy.sampling import make_generator, sample_tokens


def _draw(
    logits: torch.Tensor, temperature: float, top_p: float, n: int, seed: int = 0
) -> torch.Tensor:
    """``n`` draws for the single row ``logits`` from one seeded generator."""
    generator = make_generator(seed, logits.device)
    temps, top_ps = torch.tensor([temperature]), torch.tensor([top_p])
    return torch.cat([sample_tokens(logits[None], temps, top_ps, [generator])[0] for _ in range(n)])


@pytest.fixture(params=[1024, 7], ids=["block-1024", "block-7"])
def block(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Run each test with the real block size and with one that does not divide the vocabulary."""
    monkeypatch.setattr(sampling, "SEARCH_BLOCK", request.param)
    return int(request.param)


def test_frequencies_match_softmax(block: int) -> None:
    torch.manual_seed(0)
    logits = torch.randn(50) * 2
    draws = _draw(logits, 1.0, 1.0, 20_000)
    expected = torch.softmax(logits, -1)
    observed = torch.bincount(draws, minlength=50).double() / len(draws)
    # Three binomial standard deviations per token at 20,000 draws.
    tolerance = 3 * (expected * (1 - expected) / len(draws)).sqrt() + 1e-3
    assert bool(((observed - expected).abs() <= tolerance).all())


def test_zero_weight_tokens_are_never_drawn(block: int) -> None:
    logits = torch.full((40,), float("-inf"))
    logits[[3, 17, 39]] = torch.tensor([0.0, 1.0, 2.0])
    draws = _draw(logits, 1.0, 1.0, 3_000)
    assert set(draws.tolist()) <= {3, 17, 39}
    assert set(draws.tolist()) == {3, 17, 39}


def test_top_p_keeps_only_the_nucleus(block: int) -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.1, 0.06, 0.04]))
    draws = _draw(logits, 1.0, 0.75, 2_000)
    assert set(draws.tolist()) == {0, 1}


def test_greedy_rows_take_the_argmax_and_keep_their_generator_still() -> None:
    logits = torch.tensor([[0.1, 3.0, 0.2], [2.0, 0.0, 1.0]])
    generators = [make_generator(1, logits.device), make_generator(2, logits.device)]
    before = [g.get_state() for g in generators]
    tokens, logprobs = sample_tokens(logits, torch.zeros(2), torch.ones(2), generators)
    assert tokens.tolist() == [1, 0]
    assert torch.allclose(logprobs, torch.log_softmax(logits, -1)[[0, 1], [1, 0]])
    assert all(torch.equal(b, g.get_state()) for b, g in zip(before, generators, strict=True))


def test_logprobs_are_of_the_tempered_distribution() -> None:
    torch.manual_seed(1)
    logits = torch.randn(3, 300)
    temps = torch.tensor([0.5, 1.0, 2.0])
    generators = [make_generator(i, logits.device) for i in range(3)]
    tokens, logprobs = sample_tokens(logits, temps, torch.ones(3), generators)
    expected = torch.log_softmax(logits / temps[:, None], -1).gather(-1, tokens[:, None])
    assert torch.allclose(logprobs, expected.squeeze(-1), atol=1e-5)


def test_a_row_draws_the_same_whatever_shares_its_batch() -> None:
    torch.manual_seed(2)
    row = torch.randn(5_000)
    alone = _draw(row, 0.9, 1.0, 30, seed=7)
    generator = make_generator(7, row.device)
    together = []
    for _ in range(30):
        batch = torch.stack([torch.randn(5_000), row, torch.randn(5_000)])
        others = [make_generator(99, row.device), generator, make_generator(98, row.device)]
        temps = torch.tensor([0.0, 0.9, 1.3])
        together.append(int(sample_tokens(batch, temps, torch.ones(3), others)[0][1]))
    assert together == alone.tolist()
