"""Okapi BM25 (Robertson & Zaragoza 2009, "The Probabilistic Relevance Framework: BM25 and
Beyond"): for a query q and a document d,

    score(q, d) = sum over terms t of q:  idf(t) * f(t, d) (k1 + 1) / (f(t, d) + k1 (1 - b + b |d| / avgdl))
    idf(t) = ln(1 + (N - n(t) + 0.5) / (n(t) + 0.5))

with f(t, d) the count of t in d, |d| its length in terms, avgdl the mean length, N the
documents and n(t) those holding t (Lucene's idf, never negative). A memory holds hundreds of
items, so a plain index in Python is fast enough and adds no dependency.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

K1 = 1.5
B = 0.75
_TERM = re.compile(r"[a-z0-9]+")


def terms(text: str) -> list[str]:
    """Lower-case alphanumeric runs: the index's terms."""
    return _TERM.findall(text.lower())


class BM25Index:
    """BM25 over ``documents``; ``add`` grows it (a memory that learns during a run)."""

    def __init__(self, documents: Sequence[str] = (), *, k1: float = K1, b: float = B) -> None:
        self.k1, self.b = k1, b
        self.counts: list[Counter[str]] = []
        self.lengths: list[int] = []
        self.holding: Counter[str] = Counter()
        for doc in documents:
            self.add(doc)

    def add(self, document: str) -> None:
        """Index one more document (its index is the count before)."""
        counts = Counter(terms(document))
        self.counts.append(counts)
        self.lengths.append(sum(counts.values()))
        self.holding.update(counts.keys())

    def idf(self, term: str) -> float:
        n, held = len(self.counts), self.holding[term]
        return math.log(1.0 + (n - held + 0.5) / (held + 0.5))

    def scores(self, query: str) -> list[float]:
        """Every document's score for ``query``."""
        if not self.counts:
            return []
        avgdl = sum(self.lengths) / len(self.lengths) or 1.0
        wanted = [t for t in terms(query) if t in self.holding]
        out = []
        for counts, length in zip(self.counts, self.lengths, strict=True):
            score = 0.0
            for t in wanted:
                f = counts.get(t, 0)
                if f:
                    norm = f + self.k1 * (1 - self.b + self.b * length / avgdl)
                    score += self.idf(t) * f * (self.k1 + 1) / norm
            out.append(score)
        return out

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """The ``k`` best documents with a positive score, best first (ties: the earlier)."""
        ranked = sorted(enumerate(self.scores(query)), key=lambda p: (-p[1], p[0]))
        return [(i, s) for i, s in ranked[:k] if s > 0]
