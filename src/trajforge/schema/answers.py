"""Reading answers out of conversations and normalising them for comparison.

One vocabulary for both sides: environments' verifiers and the judge's rule scorers read the
final answer with ``final_answer`` and compare text with ``normalize_answer``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from trajforge.schema.messages import Message, Role

_ANSWER_IS = re.compile(r"(?:final answer|answer)\s*(?:is|:)\s*(.+)", re.I | re.S)
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
# Punctuation goes, except a minus sign before a digit and a decimal point between digits, so
# numbers survive whole ("-3.5" stays, "U.S." becomes "u s").
_PUNCTUATION = re.compile(r"-(?!\d)|(?<!\d)\.|\.(?!\d)|[^\w\s.\-]|_")


def final_answer(messages: Sequence[Message]) -> str | None:
    """The content of the last assistant message if it calls no tool; ``None`` when the
    conversation has no assistant message or ends on a tool call (it never answered)."""
    for msg in reversed(messages):
        if msg.role is Role.ASSISTANT:
            return msg.text if not msg.tool_calls else None
    return None


def answer_span(text: str) -> str:
    """The part after "the answer is", else the whole text, without trailing punctuation."""
    match = _ANSWER_IS.search(text)
    span = match.group(1) if match else text
    return span.strip().rstrip(".!").strip()


def normalize_answer(text: str) -> str:
    """Lower case, thousands separators and punctuation dropped (numbers kept whole), articles
    dropped, whitespace collapsed: ``"The answer: 1,234.5 Km!"`` -> ``"answer 1234.5 km"``."""
    text = _THOUSANDS.sub("", text.lower())
    text = _PUNCTUATION.sub(" ", text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def contains_answer(text: str, gold: str) -> bool:
    """Whether the normalised ``gold`` occurs in the normalised ``text`` as whole words
    (``"42"`` is in ``"it is 42"``, not in ``"1425"``); an empty gold is in nothing."""
    want = normalize_answer(gold)
    return bool(want) and f" {want} " in f" {normalize_answer(text)} "


def parse_number(text: str) -> float | None:
    """The last number in ``text`` ("about 1,234.5 km" -> 1234.5), or None."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        value = float(found[-1].replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def numbers_close(a: float, b: float, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)


def parse_table(text: str) -> list[list[Any]] | None:
    """A result table from an answer: a JSON list of rows, or lines of ``|``/``,``-separated cells."""
    span = text.strip()
    fenced = re.search(r"```(?:json)?\s*(.+?)```", span, re.S)
    if fenced:
        span = fenced.group(1).strip()
    try:
        data = json.loads(span)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, list):
        return [list(row) if isinstance(row, list | tuple) else [row] for row in data]
    lines = [ln.strip().strip("|") for ln in span.splitlines() if ln.strip()]
    if not lines:
        return None
    sep = "|" if "|" in lines[0] else ","
    return [[cell.strip() for cell in ln.split(sep)] for ln in lines]


def _cell_key(cell: Any, digits: int) -> Any:
    if isinstance(cell, bool):
        return ("b", cell)
    if isinstance(cell, int | float):
        return ("n", round(float(cell), digits))
    if isinstance(cell, str):
        number = cell.strip().replace(",", "")
        try:
            return ("n", round(float(number), digits))
        except ValueError:
            return ("s", normalize_answer(cell))
    if cell is None:
        return ("s", "null")
    return ("s", normalize_answer(str(cell)))


def tables_equal(
    predicted: list[list[Any]], gold: list[list[Any]], *, ordered: bool = False, digits: int = 6
) -> bool:
    """Result-set equality: same rows (as multisets unless ``ordered``), numbers rounded to
    ``digits`` places, strings normalised; column order matters, row order only if ``ordered``."""
    pk = [tuple(_cell_key(c, digits) for c in row) for row in predicted]
    gk = [tuple(_cell_key(c, digits) for c in row) for row in gold]
    if ordered:
        return pk == gk
    return sorted(pk, key=repr) == sorted(gk, key=repr)
