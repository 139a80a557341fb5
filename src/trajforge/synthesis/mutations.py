"""Bug-injection rules (SWE-smith's procedural modifications): each rule finds the places in one
function where it applies and says what text goes there instead; ``mutations`` turns each place
into a changed copy of the function, the rest of the file left byte for byte as it was.

Rules (``RULES``): ``flip-comparison`` (``<`` to ``<=``, ``==`` to ``!=``, ``in`` to ``not in``,
...), ``swap-operator`` (``+`` and ``-``, ``*`` and ``//``, ``+=`` and ``-=``, ...),
``negate-condition`` (an ``if``/``while`` test negated), ``drop-if`` (an ``if`` without ``else``
removed with its body), ``drop-clause`` (one operand of ``and``/``or`` removed),
``off-by-one`` (an integer constant plus one) and ``off-by-one-range`` (``range``'s stop minus
one).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

Edit = tuple[ast.AST, str]
"""A node (its whole source span) and the text that replaces it."""
Rule = Callable[[ast.AST], Iterator[Edit]]
Function = ast.FunctionDef | ast.AsyncFunctionDef

_COMPARISONS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In,
}  # fmt: skip
_OPERATORS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult,
    ast.Div: ast.Mult, ast.Mod: ast.FloorDiv, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd,
    ast.LShift: ast.RShift, ast.RShift: ast.LShift,
}  # fmt: skip


def flip_comparison(node: ast.AST) -> Iterator[Edit]:
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in _COMPARISONS:
                ops = [*node.ops[:i], _COMPARISONS[type(op)](), *node.ops[i + 1 :]]
                yield node, ast.unparse(ast.Compare(node.left, ops, node.comparators))


def swap_operator(node: ast.AST) -> Iterator[Edit]:
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        op = _OPERATORS[type(node.op)]()
        yield node, ast.unparse(ast.BinOp(node.left, op, node.right))
    elif isinstance(node, ast.AugAssign) and type(node.op) in _OPERATORS:
        op = _OPERATORS[type(node.op)]()
        yield node, ast.unparse(ast.AugAssign(node.target, op, node.value))


def negate_condition(node: ast.AST) -> Iterator[Edit]:
    if isinstance(node, ast.If | ast.While):
        yield node.test, ast.unparse(ast.UnaryOp(ast.Not(), node.test))


def drop_if(node: ast.AST) -> Iterator[Edit]:
    if isinstance(node, ast.If) and not node.orelse:
        yield node, "pass"


def drop_clause(node: ast.AST) -> Iterator[Edit]:
    if isinstance(node, ast.BoolOp):
        for i in range(len(node.values)):
            rest = [*node.values[:i], *node.values[i + 1 :]]
            kept = rest[0] if len(rest) == 1 else ast.BoolOp(node.op, rest)
            yield node, ast.unparse(kept)


def off_by_one(node: ast.AST) -> Iterator[Edit]:
    value = node.value if isinstance(node, ast.Constant) else None
    if isinstance(value, int) and not isinstance(value, bool):
        yield node, repr(value + 1)


def off_by_one_range(node: ast.AST) -> Iterator[Edit]:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return
    plain = node.args and not any(isinstance(a, ast.Starred) for a in node.args)
    if node.func.id == "range" and plain:
        stop = node.args[0] if len(node.args) == 1 else node.args[1]
        yield stop, ast.unparse(ast.BinOp(stop, ast.Sub(), ast.Constant(1)))


RULES: dict[str, Rule] = {
    "flip-comparison": flip_comparison,
    "swap-operator": swap_operator,
    "negate-condition": negate_condition,
    "drop-if": drop_if,
    "drop-clause": drop_clause,
    "off-by-one": off_by_one,
    "off-by-one-range": off_by_one_range,
}


@dataclass(frozen=True)
class Mutation:
    """One function of one file changed by one rule at one place.

    Attributes:
        file: The file, relative to the repository.
        function: The function's qualified name (``Class.method``).
        rule: The rule's name.
        lines: ``(start, end)``: the function's lines in the original file, 0-based, end
            excluded.
        original: Those lines' text.
        buggy: What replaces them.
    """

    file: str
    function: str
    rule: str
    lines: tuple[int, int]
    original: str
    buggy: str

    def apply(self, text: str) -> str:
        """``text`` (the original file) with the change made."""
        lines = text.splitlines(keepends=True)
        start, end = self.lines
        return "".join([*lines[:start], self.buggy, *lines[end:]])


def _functions(tree: ast.AST) -> Iterator[tuple[str, Function]]:
    """Every function and method with its qualified name, nested ones included."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, Function]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield f"{prefix}{child.name}", child
                yield from walk(child, f"{prefix}{child.name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``function``'s body, without nested functions, classes, f-strings (whose
    parts have no reliable positions) or docstrings."""
    body = list(getattr(function, "body", []))
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    stack: list[ast.AST] = body[::-1]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.JoinedStr):
            continue
        yield node
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _replace(lines: list[bytes], node: ast.AST, text: str, start: int) -> list[bytes]:
    """``lines`` (a function's from file line ``start``, as bytes: ast's columns count bytes)
    with ``node``'s span replaced by ``text``."""
    expr = node if isinstance(node, ast.expr | ast.stmt) else None
    assert expr is not None and expr.end_lineno is not None and expr.end_col_offset is not None
    first, last = expr.lineno - 1 - start, expr.end_lineno - 1 - start
    head, tail = lines[first][: expr.col_offset], lines[last][expr.end_col_offset :]
    return [*lines[:first], head + text.encode() + tail, *lines[last + 1 :]]


@dataclass(frozen=True)
class Span:
    """One function of a file: its qualified name, its lines (0-based, end excluded) and text."""

    file: str
    function: str
    lines: tuple[int, int]
    text: str

    def changed(self, rule: str, buggy: str) -> Mutation:
        return Mutation(self.file, self.function, rule, self.lines, self.text, buggy)


def _spans(file: str, text: str) -> Iterator[tuple[Span, Function]]:
    lines = text.splitlines(keepends=True)
    for name, node in _functions(ast.parse(text)):
        start, end = node.lineno - 1, node.end_lineno or node.lineno
        yield Span(file, name, (start, end), "".join(lines[start:end])), node


def functions(file: str, text: str) -> list[Span]:
    """The functions of ``text`` (the contents of ``file``), nested ones and methods included."""
    return [span for span, _ in _spans(file, text)]


def parses(text: str) -> bool:
    """Whether ``text`` is Python source."""
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def mutations(file: str, text: str) -> Iterator[Mutation]:
    """Every single-place change the rules make to the functions of ``text`` (the contents of
    ``file``), in file order; a change that does not parse is left out."""
    lines = text.splitlines(keepends=True)
    for span, function in _spans(file, text):
        start, end = span.lines
        own = [line.encode() for line in lines[start:end]]
        for node in _own_nodes(function):
            for rule_name, rule in RULES.items():
                for target, replacement in rule(node):
                    buggy = b"".join(_replace(own, target, replacement, start)).decode()
                    changed = "".join([*lines[:start], buggy, *lines[end:]])
                    if buggy != span.text and parses(changed):
                        yield span.changed(rule_name, buggy)
