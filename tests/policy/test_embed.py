"""Text embeddings (``policy.embed``) from the tiny model and from encoder and causal-LM folders:
unit rows, the same vectors however texts are batched and padded, the last hidden state's
mean, truncation, and an index over them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertModel, BertTokenizer

from trajforge.errors import ConfigError
from trajforge.policy.embed import TextEmbedder, is_encoder_folder
from trajforge.policy.models.tiny import tiny_model_and_tokenizer
from trajforge.retrieval import EmbeddingIndex

TEXTS = [
    "open the door with the key",
    "go north twice, then east to the goal",
    "the calculator adds two numbers and reports the total",
    "a",
    "walls block the way south",
]
# fp32 carries ~7 significant digits (eps 6e-8). A batch changes the shapes of the matrix
# products, so BLAS may sum the same terms in another order: each of the 64 components of a
# unit vector then moves by a few eps times the depth (two layers, a norm, a mean), ~1e-6 at
# most. 1e-5 is ten times that, and still a thousand times below how far the vectors of two
# different texts lie apart (checked below), so a real change would not pass as rounding.
FP32_TOL = 1e-5


@pytest.fixture(scope="module")
def tiny() -> TextEmbedder:
    return TextEmbedder.load("tiny", batch_size=2)


def test_embeddings_are_unit_rows_and_an_empty_text_is_zero(tiny: TextEmbedder) -> None:
    vectors = tiny([*TEXTS, ""])
    assert vectors.dtype == np.float32 and vectors.shape == (len(TEXTS) + 1, 64)
    assert np.linalg.norm(vectors[:-1], axis=1) == pytest.approx(1.0, abs=1e-6)
    assert not vectors[-1].any()
    assert tiny([]).shape == (0, 64)


def test_a_batch_gives_the_vectors_of_one_text_at_a_time(tiny: TextEmbedder) -> None:
    batched = tiny(TEXTS)  # batch_size 2: three passes, texts regrouped by length
    alone = np.stack([tiny([text])[0] for text in TEXTS])
    assert np.abs(batched - alone).max() < FP32_TOL
    # Different texts lie far apart, so the tolerance above cannot hide a mix-up.
    apart = np.abs(alone[:, None, :] - alone[None, :, :]).max(axis=2)
    assert apart[~np.eye(len(TEXTS), dtype=bool)].min() > 100 * FP32_TOL


def test_padding_does_not_change_a_text(tiny: TextEmbedder) -> None:
    short, long = TEXTS[3], " ".join(TEXTS)
    wide = TextEmbedder.load("tiny", batch_size=16)
    together = wide([short, long])  # one batch: the short text padded by dozens of tokens
    assert np.abs(together[0] - wide([short])[0]).max() < FP32_TOL


def test_the_embedding_is_the_mean_of_the_last_hidden_state() -> None:
    model, tokenizer = tiny_model_and_tokenizer()
    ids = torch.tensor([tokenizer(TEXTS[0])["input_ids"]])
    with torch.inference_mode():
        hidden = model.model(input_ids=ids).last_hidden_state[0]
    mean = hidden.mean(dim=0)
    expected = (mean / mean.norm()).numpy()
    got = TextEmbedder(model, tokenizer, name="tiny")([TEXTS[0]])[0]
    assert np.abs(got - expected).max() < FP32_TOL


def test_texts_are_cut_at_max_length() -> None:
    cut = TextEmbedder.load("tiny", max_length=4)
    first, whole = cut(["a b c d", "a b c d e f g h"])
    assert np.abs(first - whole).max() < FP32_TOL
    full = TextEmbedder.load("tiny")(["a b c d", "a b c d e f g h"])
    assert np.abs(full[0] - full[1]).max() > 100 * FP32_TOL


def test_an_index_over_the_embeddings_finds_the_same_text_and_an_added_one(
    tiny: TextEmbedder,
) -> None:
    index = EmbeddingIndex(TEXTS, embed=tiny)
    for i, text in enumerate(TEXTS):
        best, score = index.top(text, 1)[0]
        assert best == i and score == pytest.approx(1.0, abs=1e-5)
    index.add("pick up the lamp in the cellar")
    assert len(index) == len(TEXTS) + 1
    assert index.top("pick up the lamp in the cellar", 2)[0][0] == len(TEXTS)
    assert len(index.top("anything", 3)) == 3  # the k nearest, whatever their sign


def _bert_folder(folder: Path) -> Path:
    folder.mkdir()
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "open", "the", "door", "key", "go"]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    tokenizer = BertTokenizer(vocab_file=str(folder / "vocab.txt"))
    config = BertConfig(
        vocab_size=len(words),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_an_encoder_folder_loads_through_automodel(tmp_path: Path) -> None:
    folder = _bert_folder(tmp_path / "bert")
    assert is_encoder_folder(str(folder))
    embedder = TextEmbedder.load(str(folder), batch_size=2)
    assert type(embedder.model).__name__ == "BertModel"
    texts = ["open the door", "go", "the key the door the key"]
    vectors = embedder(texts)
    assert vectors.shape == (3, 32)
    assert np.linalg.norm(vectors, axis=1) == pytest.approx(1.0, abs=1e-6)
    alone = np.stack([embedder([t])[0] for t in texts])
    assert np.abs(vectors - alone).max() < FP32_TOL


def test_a_causal_folder_loads_through_the_policy_loader(tmp_path: Path) -> None:
    model, tokenizer = tiny_model_and_tokenizer()
    model.save_pretrained(tmp_path / "llm")
    tokenizer.save_pretrained(tmp_path / "llm")
    assert not is_encoder_folder(str(tmp_path / "llm"))
    embedder = TextEmbedder.load(str(tmp_path / "llm"))
    assert type(embedder.model).__name__ == "LlamaForCausalLM"
    same = TextEmbedder.load("tiny")(TEXTS[:2])
    assert np.abs(embedder(TEXTS[:2]) - same).max() < FP32_TOL


def test_a_name_with_no_weights_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown embedding model 'tinny' \(did you mean"):
        TextEmbedder.load("tinny")
    with pytest.raises(ConfigError, match="unknown embedding model 'expert'"):
        TextEmbedder.load("expert")
    with pytest.raises(ConfigError, match="unknown embedding model"):
        TextEmbedder.load(str(tmp_path))  # a folder without config.json
