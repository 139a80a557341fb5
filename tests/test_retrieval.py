"""BM25 through bm25s against values computed by hand; the cosine index over a caller's
embeddings, with a hand-made embedding of letter counts (no model, no torch)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from trajforge.retrieval import BM25, TWO_OR_MORE, EmbeddingIndex, Retriever


def test_terms_are_lower_case_alphanumeric_runs() -> None:
    assert BM25().terms("Get key-A, then D2!") == ["get", "key", "a", "then", "d2"]
    words = BM25(token_pattern=TWO_OR_MORE, stopwords="en")
    assert words.terms("Get the key-A, then D2!") == ["get", "key", "d2"]


def test_scores_match_the_lucene_formula() -> None:
    index = BM25(["door key", "key key goal", "wall"], k1=1.5, b=0.75)
    # "key": in 2 of 3 docs, idf = ln(1 + (3 - 2 + 0.5) / (2 + 0.5)) = ln(1.6)
    idf = math.log(1.6)
    avgdl = (2 + 3 + 1) / 3
    doc0 = idf * 1 / (1 + 1.5 * (0.25 + 0.75 * 2 / avgdl))
    doc1 = idf * 2 / (2 + 1.5 * (0.25 + 0.75 * 3 / avgdl))
    # bm25s scores in float32: 1e-6 relative is its rounding, not a tolerance for the formula
    assert index.scores("key") == pytest.approx([doc0, doc1, 0.0], rel=1e-6)
    assert index.scores("unknown") == [0.0, 0.0, 0.0]
    assert index.scores("!!!") == [0.0, 0.0, 0.0]


def test_top_ranks_best_first_and_drops_non_matches() -> None:
    index = BM25(["door key", "key key goal", "wall"])
    assert [i for i, _ in index.top("key goal", 5)] == [1, 0]
    assert index.top("key", 1)[0][0] == 1
    assert BM25().top("key", 3) == []


def test_ties_keep_the_earlier_document_first() -> None:
    index = BM25(["key door", "wall", "door key"])
    assert [i for i, _ in index.top("key", 2)] == [0, 2]


def test_added_documents_are_found() -> None:
    index = BM25(["door"])
    index.add("goal south")
    assert len(index) == 2
    assert index.top("goal", 2)[0][0] == 1


class LetterCounts:
    """Each text as its counts of a, b and c; counts its calls and the texts it embedded."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.seen += texts
        return np.array([[t.count("a"), t.count("b"), t.count("c")] for t in texts], float)


def test_scores_are_cosine_similarities() -> None:
    index = EmbeddingIndex(["a", "ab", "c", "x"], embed=LetterCounts())
    # Query "aab" is (2, 1, 0): cos with (1, 0, 0) is 2 / sqrt 5, with (1, 1, 0) 3 / sqrt 10;
    # "c" is orthogonal and "x" is the zero vector (no letters), both 0.
    expected = [2 / math.sqrt(5), 3 / math.sqrt(10), 0.0, 0.0]
    assert index.scores("aab") == pytest.approx(expected, abs=1e-6)
    assert [i for i, _ in index.top("aab", 2)] == [1, 0]


def test_the_k_best_are_kept_whatever_their_sign() -> None:
    def signed(texts: list[str]) -> np.ndarray:
        return np.array([[1.0, 0.0] if t == "up" else [-1.0, 0.1] for t in texts])

    index = EmbeddingIndex(["down", "up", "down too"], embed=signed)
    ranked = index.top("up", 3)
    assert [i for i, _ in ranked] == [1, 0, 2]
    assert ranked[0][1] == pytest.approx(1.0) and ranked[2][1] < 0
    assert len(index.top("up", 2)) == 2


def test_embedding_ties_keep_the_earlier_document_first() -> None:
    index = EmbeddingIndex(["ab", "c", "ba", "abab"], embed=LetterCounts())
    assert [i for i, _ in index.top("ab", 3)] == [0, 2, 3]


def test_documents_are_embedded_once_and_an_added_one_is_found() -> None:
    embed = LetterCounts()
    index = EmbeddingIndex(["a", "b"], embed=embed)
    index.scores("a")
    index.scores("b")
    index.add("cc")
    assert embed.seen == ["a", "b", "a", "b", "cc"]  # the documents once, each query, the new one
    assert len(index) == 3 and index.texts[2] == "cc"
    assert index.top("c", 1) == [(2, pytest.approx(1.0))]


def test_an_empty_index_grows_and_takes_torch_tensors() -> None:
    def as_tensor(texts: list[str]) -> torch.Tensor:
        return torch.tensor([[t.count("a"), t.count("b")] for t in texts], dtype=torch.float32)

    index = EmbeddingIndex(embed=as_tensor)
    assert len(index) == 0 and index.scores("a") == [] and index.top("a", 3) == []
    index.add("b")
    index.add("a")
    assert [i for i, _ in index.top("aa", 2)] == [1, 0]


def test_an_embedding_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(ValueError, match=r"shape \(3,\) for 2 texts"):
        EmbeddingIndex(["a", "b"], embed=lambda texts: np.zeros(3))


def test_both_indexes_are_retrievers() -> None:
    # The protocol's members, read from it: a rename in one class fails here.
    members = {"__len__", "add", "scores", "top"}
    assert members <= set(dir(Retriever))
    for index in (BM25(["a"]), EmbeddingIndex(["a"], embed=LetterCounts())):
        assert all(callable(getattr(index, m)) for m in members)


def test_the_module_imports_no_torch() -> None:
    probe = "import json, sys, trajforge.retrieval; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert "torch" not in json.loads(out.stdout)
