"""A small, safe evaluator for the arithmetic and conditions written in rule files.

Accepted: numbers, names, + - * / // %, unary -, comparisons, and/or/not,
parentheses, the functions in FUNCTIONS, and first(a, b, ...), the first argument
that has a value. Anything else (attribute access,
subscripts, strings, lambdas, ** ...) is refused when the rule file is loaded,
so a rule from someone else can never run code. Python's eval is never used:
the expression is parsed to a syntax tree, only the nodes above are accepted, and
the checked tree is turned into nested closures once.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from triage.plan import kvcache


class ExprError(ValueError):
    pass


class Missing(Exception):
    """A name the expression needs has no value for this event."""


FUNCTIONS: dict[str, Callable[..., Any]] = {
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
        # evaluate(names): the value; raises Missing when a name has no value. The compiled
        # closure itself, not a method calling it: a rule's require runs for every metrics line.
        self.evaluate: Compiled = _compile(self.tree)

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


# Each checked node becomes a closure once, at load: evaluating a rule's `require` for
# every metrics line then calls closures instead of dispatching on node types. The
# closures are built from the checked tree only; no source text is ever compiled.
Compiled = Callable[[Mapping[str, Any]], Any]


def _compile(node: ast.AST) -> Compiled:
    if isinstance(node, ast.Constant):
        constant = node.value
        return lambda names: constant
    if isinstance(node, ast.Name):
        return _compile_name(node.id)
    if isinstance(node, ast.BinOp):
        return _compile_binary(BINARY[type(node.op)], _compile(node.left), _compile(node.right))
    if isinstance(node, ast.UnaryOp):
        operand = _compile(node.operand)
        if isinstance(node.op, ast.Not):
            return lambda names: not operand(names)
        if isinstance(node.op, ast.USub):
            return lambda names: -operand(names)
        return operand
    if isinstance(node, ast.BoolOp):
        return _compile_bool(isinstance(node.op, ast.And), [_compile(v) for v in node.values])
    if isinstance(node, ast.Compare):
        return _compile_compare(
            _compile(node.left), [(COMPARE[type(op)], _compile(c)) for op, c in zip(node.ops, node.comparators, strict=True)]
        )
    if isinstance(node, ast.Call):
        name = node.func.id  # type: ignore[attr-defined]
        args = [_compile(arg) for arg in node.args]
        return _compile_first(args) if name == "first" else _compile_call(name, FUNCTIONS[name], args)
    raise ExprError(f"unexpected node {ast.dump(node)}")  # unreachable after _check


def _compile_name(name: str) -> Compiled:
    def value_of(names: Mapping[str, Any]) -> Any:
        value = names.get(name)
        if value is None:
            raise Missing(name)
        return value

    return value_of


def _compile_binary(function: Callable[[Any, Any], Any], left: Compiled, right: Compiled) -> Compiled:
    def binary(names: Mapping[str, Any]) -> Any:
        a, b = left(names), right(names)
        try:
            result = function(a, b)
        except ZeroDivisionError:
            raise Missing("division by zero") from None
        if isinstance(result, int | float) and abs(result) > MAX_MAGNITUDE:
            raise Missing("number out of range")
        return result

    return binary


def _compile_bool(is_and: bool, values: list[Compiled]) -> Compiled:
    """True or False (as all() and any() give), evaluating operands only until one decides."""
    if len(values) == 2:
        left, right = values
        if is_and:
            return lambda names: bool(left(names) and right(names))
        return lambda names: bool(left(names) or right(names))

    def all_or_any(names: Mapping[str, Any]) -> bool:
        for value in values:
            if bool(value(names)) is not is_and:
                return not is_and
        return is_and

    return all_or_any


def _compile_compare(left: Compiled, steps: list[tuple[Callable[[Any, Any], bool], Compiled]]) -> Compiled:
    if len(steps) == 1:
        (op, right), = steps
        return lambda names: bool(op(left(names), right(names)))

    def chain(names: Mapping[str, Any]) -> bool:
        a = left(names)
        for op, right in steps:
            b = right(names)
            if not op(a, b):
                return False
            a = b
        return True

    return chain


def _compile_call(name: str, function: Callable[..., Any], args: list[Compiled]) -> Compiled:
    def call(names: Mapping[str, Any]) -> Any:
        values = [arg(names) for arg in args]
        try:
            return function(*values)
        except (TypeError, ValueError, ZeroDivisionError, OverflowError):
            raise Missing(f"{name}() of {values}") from None

    return call


def _compile_first(args: list[Compiled]) -> Compiled:
    def first(names: Mapping[str, Any]) -> Any:
        for arg in args:
            try:
                return arg(names)
            except Missing:
                continue
        raise Missing("first(): no argument has a value")

    return first


PLACEHOLDER = re.compile(r"\{(?P<name>[A-Za-z_]\w*)(?::(?P<spec>[^{}]*))?\}")


# What may follow the colon in {name:spec}: a hostile width ({n:>999999999}) would build
# a string of that many characters, so widths and precisions are kept to two digits.
SAFE_SPEC = re.compile(r"pct|d|[<>^]?\d{0,2},?(?:\.\d{1,2})?[dfeg%]?")


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

    def fill(match: re.Match) -> str:
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
