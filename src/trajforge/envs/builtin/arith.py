"""A safe arithmetic evaluator: an AST whitelist, never ``eval``, with bounded results.

Only numbers, ``+ - * / // % **``, unary signs, parentheses and a few named functions are
accepted. Work that could blow up (``9**9**9``, ``factorial(10**6)``, giant products) is refused
with a message before it is computed.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

from trajforge.envs.tool import ToolError

MAX_EXPRESSION_CHARS = 300
MAX_NODES = 120
MAX_INT_BITS = 4096
MAX_FACTORIAL = 170
MAX_ROUND_DIGITS = 100

Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


def _factorial(x: Number) -> Number:
    if isinstance(x, float):
        if not x.is_integer():
            raise ToolError(f"factorial({x:g}): needs a whole number")
        x = int(x)
    if x < 0:
        raise ToolError(f"factorial({x}): needs a non-negative number")
    if x > MAX_FACTORIAL:
        raise ToolError(
            f"factorial({x}): refused, the result would be too large (limit {MAX_FACTORIAL})"
        )
    return math.factorial(x)


def _sqrt(x: Number) -> Number:
    if x < 0:
        raise ToolError(f"sqrt({x:g}): square root of a negative number")
    return math.sqrt(x)


def _round(x: Number, ndigits: int | None = None) -> Number:
    if ndigits is None:
        return round(x)
    if not isinstance(ndigits, int) or abs(ndigits) > MAX_ROUND_DIGITS:
        raise ToolError(f"round(): ndigits must be a whole number within ±{MAX_ROUND_DIGITS}")
    return round(x, ndigits)


_FUNCTIONS: dict[str, Callable[..., Number]] = {
    "abs": abs,
    "round": _round,
    "min": min,
    "max": max,
    "sqrt": _sqrt,
    "factorial": _factorial,
}


def _check_size(value: Number) -> Number:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ToolError(f"refused: the result has more than {MAX_INT_BITS} bits")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("refused: the result is not a finite number")
    return value


def _power(base: Number, exponent: Number) -> Number:
    if isinstance(base, int) and isinstance(exponent, int) and exponent >= 0:
        if abs(base) > 1 and exponent * math.log2(abs(base)) > MAX_INT_BITS:
            raise ToolError(f"refused: {base}**{exponent} is too large to compute")
        return base**exponent
    try:
        result = float(base) ** float(exponent)
    except OverflowError:
        raise ToolError(f"refused: {base}**{exponent} is too large to compute") from None
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    if isinstance(result, complex):
        raise ToolError(f"{base}**{exponent} is not a real number")
    return result


class _Evaluator:
    def __init__(self) -> None:
        self.nodes = 0

    def eval(self, node: ast.AST) -> Number:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ToolError(f"refused: the expression has more than {MAX_NODES} parts")
        if isinstance(node, ast.Expression):
            return self.eval(node.body)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise ToolError(f"unsupported value {node.value!r}; only numbers are allowed")
            return _check_size(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
            value = self.eval(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp):
            left, right = self.eval(node.left), self.eval(node.right)
            if isinstance(node.op, ast.Pow):
                return _check_size(_power(left, right))
            if isinstance(node.op, ast.BitXor):
                raise ToolError("'^' is not a power here; write ** for powers")
            fn = _BINARY.get(type(node.op))
            if fn is None:
                raise ToolError(f"unsupported operator {type(node.op).__name__}")
            if (
                isinstance(node.op, ast.Mult)
                and isinstance(left, int)
                and isinstance(right, int)
                and left.bit_length() + right.bit_length() > MAX_INT_BITS + 1
            ):
                raise ToolError(f"refused: the result has more than {MAX_INT_BITS} bits")
            try:
                return _check_size(fn(left, right))
            except ZeroDivisionError:
                raise ToolError("division by zero") from None
            except OverflowError:
                raise ToolError("refused: the result is too large") from None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            fn = _FUNCTIONS.get(node.func.id)
            if fn is None:
                known = ", ".join(sorted(_FUNCTIONS))
                raise ToolError(f"unknown function {node.func.id!r}; available: {known}")
            args = [self.eval(a) for a in node.args]
            try:
                return _check_size(fn(*args))
            except (TypeError, ValueError, OverflowError) as exc:
                raise ToolError(f"{node.func.id}(): {exc}") from None
        if isinstance(node, ast.Name):
            raise ToolError(f"unknown name {node.id!r}; only numbers and operators are allowed")
        raise ToolError(f"unsupported syntax: {type(node).__name__}")


def safe_eval(expression: str) -> Number:
    """Evaluate an arithmetic expression; raise ``ToolError`` saying why when it is refused."""
    text = expression.strip().replace("×", "*").replace("÷", "/")
    if not text:
        raise ToolError("empty expression")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"refused: the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"invalid expression: {exc.msg} at column {exc.offset}") from None
    except ValueError as exc:
        raise ToolError(f"invalid expression: {exc}") from None
    return _Evaluator().eval(tree)


def format_number(value: Number) -> str:
    """Whole numbers without a decimal point; others with up to 10 significant digits."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value)
