"""Token sampling: the two-level CDF search draws from the right distribution, per row."""

from __future__ import annotations

import pytest
import torch

from trajforge.policy import SamplingParams
from trajforge.policy.engine import sampling
from trajforge.policy.engine.sampling import (
    UniformStream,
    make_generator,
    sample_tokens,
    step_uniforms,
    truncations,
)


def _draw(
    logits: torch.Tensor, temperature: float, top_p: float, n: int, seed: int = 0, top_k: int = 0
) -> torch.Tensor:
    """``n`` draws for the single row ``logits`` from one seeded stream."""
    stream = UniformStream.seeded(seed, logits.device)
    temps = torch.tensor([temperature])
    cuts = truncations([SamplingParams(top_p=top_p, top_k=top_k)], logits.device)
    return torch.cat(
        [
            sample_tokens(
                logits[None], temps, cuts, step_uniforms([stream], [temperature], logits.device)
            )[0]
            for _ in range(n)
        ]
    )


def _no_cuts(rows: int) -> torch.Tensor:
    return truncations([SamplingParams()] * rows, torch.device("cpu"))


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


def test_top_k_keeps_the_k_most_likely_and_the_stricter_cut_wins(block: int) -> None:
    logits = torch.log(torch.tensor([0.04, 0.3, 0.06, 0.5, 0.1]))
    assert set(_draw(logits, 1.0, 1.0, 2_000, top_k=3).tolist()) == {1, 3, 4}
    assert set(_draw(logits, 1.0, 1.0, 2_000, top_k=1).tolist()) == {3}
    # top-p 0.75 keeps two tokens, top-k 3 would keep three: two it is; and the other way round.
    assert set(_draw(logits, 1.0, 0.75, 2_000, top_k=3).tolist()) == {1, 3}
    assert set(_draw(logits, 1.0, 0.95, 2_000, top_k=2).tolist()) == {1, 3}


def test_a_top_k_row_beside_uncut_rows_leaves_them_whole() -> None:
    probs = torch.tensor([0.4, 0.3, 0.2, 0.1])
    logits = torch.log(probs).repeat(2, 1)
    streams = [UniformStream.seeded(seed, logits.device) for seed in (5, 6)]
    cuts = truncations([SamplingParams(top_k=1), SamplingParams()], logits.device)
    seen: list[set[int]] = [set(), set()]
    for _ in range(400):
        uniforms = step_uniforms(streams, [1.0, 1.0], logits.device)
        tokens, logprobs = sample_tokens(logits, torch.ones(2), cuts, uniforms)
        for row, token in enumerate(tokens.tolist()):
            seen[row].add(token)
        # Logprobs stay those of the whole tempered distribution, cut or not.
        assert torch.allclose(logprobs, torch.log(probs[tokens]))
    assert seen == [{0}, {0, 1, 2, 3}]


def test_greedy_rows_take_the_argmax_and_keep_their_stream_still() -> None:
    logits = torch.tensor([[0.1, 3.0, 0.2], [2.0, 0.0, 1.0], [0.0, 0.0, 9.0]])
    streams = [UniformStream.seeded(seed, logits.device) for seed in (1, 2, 3)]
    temps = [0.0, 0.0, 1.0]
    uniforms = step_uniforms(streams, temps, logits.device)
    tokens, logprobs = sample_tokens(logits, torch.tensor(temps), _no_cuts(3), uniforms)
    assert tokens.tolist() == [1, 0, 2]
    assert torch.allclose(logprobs[:2], torch.log_softmax(logits, -1)[[0, 1], [1, 0]])
    # Only the sampled row took a uniform: the greedy rows' next draws are still their first.
    firsts = [UniformStream.seeded(seed, logits.device).next() for seed in (1, 2, 3)]
    assert [streams[0].next(), streams[1].next()] == firsts[:2]
    assert uniforms[2].item() == firsts[2]


def test_a_stream_gives_the_numbers_of_one_at_a_time_draws() -> None:
    stream = UniformStream.seeded(11, torch.device("cpu"))
    generator = make_generator(11, torch.device("cpu"))
    one_by_one = [
        torch.rand((), generator=generator, dtype=torch.float64).item()
        for _ in range(3 * sampling.UNIFORM_CHUNK + 5)
    ]
    assert [stream.next() for _ in range(len(one_by_one))] == one_by_one


def test_logprobs_are_of_the_tempered_distribution() -> None:
    torch.manual_seed(1)
    logits = torch.randn(3, 300)
    temps = [0.5, 1.0, 2.0]
    streams = [UniformStream.seeded(i, logits.device) for i in range(3)]
    uniforms = step_uniforms(streams, temps, logits.device)
    tokens, logprobs = sample_tokens(logits, torch.tensor(temps), _no_cuts(3), uniforms)
    expected = torch.log_softmax(logits / torch.tensor(temps)[:, None], -1)
    assert torch.allclose(logprobs, expected.gather(-1, tokens[:, None]).squeeze(-1), atol=1e-5)


def test_a_row_draws_the_same_whatever_shares_its_batch() -> None:
    torch.manual_seed(2)
    row = torch.randn(5_000)
    alone = _draw(row, 0.9, 1.0, 30, seed=7)
    stream = UniformStream.seeded(7, row.device)
    others = [UniformStream.seeded(99, row.device), UniformStream.seeded(98, row.device)]
    temps = [0.0, 0.9, 1.3]
    together = []
    for _ in range(30):
        batch = torch.stack([torch.randn(5_000), row, torch.randn(5_000)])
        uniforms = step_uniforms([others[0], stream, others[1]], temps, row.device)
        tokens, _ = sample_tokens(batch, torch.tensor(temps), _no_cuts(3), uniforms)
        together.append(int(tokens[1]))
    assert together == alone.tolist()
