"""Okapi BM25 over a list of texts, through the maintained ``bm25s`` library (its Lucene
variant, Robertson & Zaragoza 2009, "The Probabilistic Relevance Framework: BM25 and Beyond"):

    score(q, d) = sum over terms t of q:  idf(t) * f(t, d) / (f(t, d) + k1 (1 - b + b |d| / avgdl))
    idf(t) = ln(1 + (N - n(t) + 0.5) / (n(t) + 0.5))

with f(t, d) the count of t in d, |d| its length in terms, avgdl the mean length, N the
documents and n(t) those holding t. One index for every retrieval in trajforge: the search env's
corpus and the experience memory's items.

``EmbeddingIndex`` ranks the same way by the cosine similarity of embeddings that the caller's
function computes (``policy.embed.TextEmbedder`` for the memory); this module imports numpy
only, never torch. Both satisfy ``Retriever``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

K1 = 1.5
B = 0.75
WORDS = r"[a-z0-9]+"
"""Every lower-case alphanumeric run, single characters too (a board's "3" is a term)."""
TWO_OR_MORE = r"(?u)\b\w\w+\b"
"""Words of two or more characters (``bm25s``'s own default)."""


class Retriever(Protocol):
    """An index of texts ranked against a query: what the memory retrieves through."""

    def __len__(self) -> int: ...

    def add(self, text: str) -> None:
        """Index one more document (its index is the count before)."""
        ...

    def scores(self, query: str) -> list[float]:
        """Every document's score for ``query``, in document order."""
        ...

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """At most ``k`` ``(index, score)``, best first (ties: the earlier document)."""
        ...


Embed = Callable[[list[str]], Any]
"""``embed(texts)`` -> an ``(n, d)`` array (numpy, or anything ``np.asarray`` or a torch
tensor's ``.numpy()`` reads), one row per text."""


class BM25:
    """BM25 over ``texts``; ``add`` grows it (the index is rebuilt at the next query: a memory
    holds hundreds of items, which ``bm25s`` indexes in milliseconds).

    Args:
        texts: The documents, in the order their indexes name them.
        token_pattern: The regular expression whose matches in the lower-cased text are terms.
        stopwords: ``bm25s``'s stop-word list (``"en"``), or ``None`` to keep every term.
    """

    def __init__(
        self,
        texts: Sequence[str] = (),
        *,
        token_pattern: str = WORDS,
        stopwords: str | None = None,
        k1: float = K1,
        b: float = B,
    ) -> None:
        import bm25s  # lazy: 0.15 s to import, paid only where something is retrieved

        self._bm25s = bm25s
        self.token_pattern, self.stopwords = token_pattern, stopwords
        self.k1, self.b = k1, b
        self.texts = list(texts)
        self._index: Any = None

    def __len__(self) -> int:
        return len(self.texts)

    def add(self, text: str) -> None:
        """Index one more document (its index is the count before)."""
        self.texts.append(text)
        self._index = None

    def terms(self, text: str) -> list[str]:
        """The terms of ``text`` as the index reads them."""
        found: list[list[str]] = self._bm25s.tokenize(
            [text], token_pattern=self.token_pattern, stopwords=self.stopwords,
            return_ids=False, show_progress=False,
        )  # fmt: skip
        return found[0] if found else []

    def scores(self, query: str) -> list[float]:
        """Every document's score for ``query``."""
        if not self.texts:
            return []
        wanted = self.terms(query)
        if not wanted:
            return [0.0] * len(self.texts)
        return [float(s) for s in self._built().get_scores(wanted)]

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """The ``k`` best documents with a positive score, best first (ties: the earlier)."""
        ranked = sorted(enumerate(self.scores(query)), key=lambda p: (-p[1], p[0]))
        return [(i, s) for i, s in ranked[:k] if s > 0]

    def _built(self) -> Any:
        if self._index is None:
            tokens = self._bm25s.tokenize(
                self.texts, token_pattern=self.token_pattern, stopwords=self.stopwords,
                return_ids=False, show_progress=False,
            )  # fmt: skip
            index = self._bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
            index.index(tokens, show_progress=False)
            self._index = index
        return self._index


class EmbeddingIndex:
    """Cosine similarity between ``embed``'s vectors of the query and of each document.

    Each document is embedded once, when indexed (``add`` embeds only the new one); each
    query costs one call of ``embed``. ``top`` keeps the ``k`` best whatever their sign: a
    cosine has no zero that means "no match" as BM25's has, so a memory always gets its ``k``
    nearest items. A zero vector (a text with no tokens) scores 0 against everything.

    Args:
        texts: The documents, in the order their indexes name them.
        embed: The embedding function (rows need not be normalised: the index does it).
    """

    def __init__(self, texts: Sequence[str] = (), *, embed: Embed) -> None:
        self.embed = embed
        self.texts = list(texts)
        self._vectors: np.ndarray | None = self._unit(self.texts) if self.texts else None

    def __len__(self) -> int:
        return len(self.texts)

    def add(self, text: str) -> None:
        """Index one more document (its index is the count before)."""
        row = self._unit([text])
        self._vectors = row if self._vectors is None else np.vstack([self._vectors, row])
        self.texts.append(text)

    def scores(self, query: str) -> list[float]:
        """Every document's cosine similarity to ``query``."""
        if self._vectors is None:
            return []
        return [float(s) for s in self._vectors @ self._unit([query])[0]]

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """The ``k`` most similar documents, best first (ties: the earlier), any sign."""
        ranked = sorted(enumerate(self.scores(query)), key=lambda p: (-p[1], p[0]))
        return ranked[:k]

    def _unit(self, texts: list[str]) -> np.ndarray:
        found = self.embed(texts)
        if hasattr(found, "detach"):  # a torch tensor, read without importing torch here
            found = found.detach().cpu().numpy()
        vectors = np.asarray(found, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise ValueError(
                f"embed gave an array of shape {vectors.shape} for {len(texts)} texts; "
                "expected one row per text"
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
