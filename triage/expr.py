"""A small, safe evaluator for the arithmetic and conditions written in rule files.

Accepted: numbers, names, + - * / // %, unary -, comparisons, and/or/not,
parentheses, the functions in FUNCTIONS, and first(a, b, ...), the first argument
that has a value. Anything else (attribute access,
subscripts, strings, lambdas, ** ...) is refused when the rule file is loaded,
so a rule from someone else can never run code. Python's eval is never used:
the expression is parsed to a syntax tree and only the nodes above are walked.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping
from typing import Any

import regex

from triage import kvcache


class ExprError(ValueError):
    pass


class Missing(Exception):
    """A name the expression needs has no value for this event."""


FUNCTIONS = {
    "min": min,
    "max": max,
    "round": round,
    "floor": math.floor,
    "ceil": math.ceil,
    "abs": abs,
    "round_down": kvcache.round_down,  # to a multiple: round_down(x, block_size)
    "round_up": kvcache.round_up,
}
CALLABLE = {*FUNCTIONS, "first"}
BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
COMPARE = {
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
MAX_LENGTH = 400
MAX_MAGNITUDE = 1e30  # keeps a hostile rule from building huge integers


class Expression:
    def __init__(self, source: str):
        source = str(source).strip()
        if len(source) > MAX_LENGTH:
            raise ExprError(f"expression longer than {MAX_LENGTH} characters")
        try:
            tree = ast.parse(source, mode="eval")
        except SyntaxError as exc:
            raise ExprError(f"cannot parse {source!r}: {exc.msg}") from None
        self.source = source
        self.tree = tree.body
        self.names: set[str] = set()
        self._check(self.tree)

    def _check(self, node: ast.AST) -> None:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise ExprError(f"only numbers are allowed, not {node.value!r}")
        elif isinstance(node, ast.Name):
            if node.id in FUNCTIONS:
                raise ExprError(f"{node.id} is a function; call it")
            self.names.add(node.id)
        elif isinstance(node, ast.BinOp) and type(node.op) in BINARY:
            self._check(node.left)
            self._check(node.right)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd | ast.Not):
            self._check(node.operand)
        elif isinstance(node, ast.BoolOp):
            for value in node.values:
                self._check(value)
        elif isinstance(node, ast.Compare) and all(type(op) in COMPARE for op in node.ops):
            self._check(node.left)
            for value in node.comparators:
                self._check(value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CALLABLE:
            if node.keywords or not node.args:
                raise ExprError(f"{node.func.id}() takes positional arguments only")
            for arg in node.args:
                self._check(arg)
        else:
            allowed = ", ".join(sorted(CALLABLE))
            raise ExprError(
                f"not allowed in an expression: {ast.unparse(node)!r} "
                f"(numbers, names, + - * / // %, comparisons, and/or/not, {allowed})"
            )

    def evaluate(self, names: Mapping[str, Any]) -> Any:
        """The value; raises Missing when a name has no value."""
        return _eval(self.tree, names)


def _eval(node: ast.AST, names: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        value = names.get(node.id)
        if value is None:
            raise Missing(node.id)
        return value
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, names), _eval(node.right, names)
        try:
            result = BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise Missing("division by zero") from None
        if isinstance(result, int | float) and abs(result) > MAX_MAGNITUDE:
            raise Missing("number out of range")
        return result
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, names)
        if isinstance(node.op, ast.Not):
            return not value
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, names) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _eval(comparator, names)
            if not COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Call):
        if node.func.id == "first":  # type: ignore[attr-defined]
            return _first(node.args, names)
        args = [_eval(arg, names) for arg in node.args]
        try:
            return FUNCTIONS[node.func.id](*args)  # type: ignore[attr-defined]
        except (TypeError, ValueError, ZeroDivisionError, OverflowError):
            raise Missing(f"{node.func.id}() of {args}") from None
    raise ExprError(f"unexpected node {ast.dump(node)}")  # unreachable after _check


def _first(args: list[ast.AST], names: Mapping[str, Any]) -> Any:
    for arg in args:
        try:
            return _eval(arg, names)
        except Missing:
            continue
    raise Missing("first(): no argument has a value")


PLACEHOLDER = regex.compile(r"\{(?P<name>[A-Za-z_]\w*)(?::(?P<spec>[^{}]*))?\}")


# What may follow the colon in {name:spec}: a hostile width ({n:>999999999}) would build
# a string of that many characters, so widths and precisions are kept to two digits.
SAFE_SPEC = regex.compile(r"pct|d|[<>^]?\d{0,2},?(?:\.\d{1,2})?[dfeg%]?")


def template_names(template: str) -> set[str]:
    return {m.group("name") for m in PLACEHOLDER.finditer(template)}


def check_template(template: str) -> None:
    """Refuse a template whose format specs could build huge strings."""
    for match in PLACEHOLDER.finditer(template):
        spec = match.group("spec")
        if spec is not None and not SAFE_SPEC.fullmatch(spec):
            raise ExprError(f"format {match.group(0)!r} not allowed (use , d pct .2f, widths up to 99)")


def render(template: str, names: Mapping[str, Any]) -> str:
    """Fill {name} and {name:spec}; raises Missing when a name has no value.

    Spec ``,`` groups thousands; ``.2f`` etc. as in Python; ``pct`` prints 0.123 as 12.3%.
    """

    def fill(match: regex.Match) -> str:
        value = names.get(match.group("name"))
        if value is None:
            raise Missing(match.group("name"))
        return format_value(value, match.group("spec"))

    return PLACEHOLDER.sub(fill, template)


def format_value(value: Any, spec: str | None = None) -> str:
    if spec == "pct":
        return f"{value * 100:.1f}%"
    if spec == "d":  # a number to paste into a flag: whole, no separators
        return str(int(value))
    if spec and SAFE_SPEC.fullmatch(spec):
        try:
            return format(value, spec)
        except (ValueError, TypeError):
            return str(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
