"""Okapi BM25 against values computed by hand."""

from __future__ import annotations

import math

import pytest

from trajforge.memory_bank.bm25 import BM25Index, terms


def test_terms_are_lower_case_alphanumeric_runs() -> None:
    assert terms("Get key-A, then D2!") == ["get", "key", "a", "then", "d2"]


def test_scores_match_the_formula() -> None:
    index = BM25Index(["door key", "key key goal", "wall"], k1=1.5, b=0.75)
    # "key": in 2 of 3 docs, idf = ln(1 + (3 - 2 + 0.5) / (2 + 0.5)) = ln(1.6)
    idf = math.log(1.6)
    avgdl = (2 + 3 + 1) / 3
    doc0 = idf * 1 * 2.5 / (1 + 1.5 * (0.25 + 0.75 * 2 / avgdl))
    doc1 = idf * 2 * 2.5 / (2 + 1.5 * (0.25 + 0.75 * 3 / avgdl))
    assert index.scores("key") == pytest.approx([doc0, doc1, 0.0])
    assert index.scores("unknown") == [0.0, 0.0, 0.0]


def test_top_ranks_best_first_and_drops_non_matches() -> None:
    index = BM25Index(["door key", "key key goal", "wall"])
    assert [i for i, _ in index.top("key goal", 5)] == [1, 0]
    assert index.top("key", 1)[0][0] == 1
    assert BM25Index().top("key", 3) == []


def test_added_documents_are_found() -> None:
    index = BM25Index(["door"])
    index.add("goal south")
    assert index.top("goal", 2)[0][0] == 1
