"""BM25 through bm25s against values computed by hand."""

from __future__ import annotations

import math

import pytest

from trajforge.retrieval import BM25, TWO_OR_MORE


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
