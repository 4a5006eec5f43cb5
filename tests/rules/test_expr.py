import pytest

from triage.rules.expr import Expression, ExprError, Missing, format_value, render


@pytest.mark.parametrize(
    "source, names, expected",
    [
        ("max_model_len - prompt_tokens", {"max_model_len": 8192, "prompt_tokens": 8000}, 192),
        ("round_up(prompt_tokens + 1, block_size)", {"prompt_tokens": 9000, "block_size": 16}, 9008),
        ("round_down(kv_tokens, 16)", {"kv_tokens": 79219}, 79216),
        ("first(estimate, kv_tokens // 16 * 16)", {"kv_tokens": 100}, 96),
        ("first(estimate, kv_tokens)", {"estimate": 5, "kv_tokens": 100}, 5),
        ("max(1, min(a, b)) * 2", {"a": 3, "b": 7}, 6),
        ("a > 0 and not b", {"a": 1, "b": False}, True),
        ("ceil(0.913 * 100) / 100", {}, 0.92),
    ],
)
def test_evaluates_arithmetic(source, names, expected):
    assert Expression(source).evaluate(names) == expected


@pytest.mark.parametrize(
    "source",
    ["__import__('os')", "a.b", "a[0]", "'text'", "lambda: 1", "2 ** 100", "open('x')", "f(x)"],
)
def test_refuses_anything_but_arithmetic(source):
    with pytest.raises(ExprError):
        Expression(source)


def test_missing_name_and_division_by_zero_are_missing_not_errors():
    with pytest.raises(Missing):
        Expression("a + b").evaluate({"a": 1})
    with pytest.raises(Missing):
        Expression("a / b").evaluate({"a": 1, "b": 0})


def test_render_formats_numbers_for_people_and_for_flags():
    names = {"n": 131072, "u": 0.125, "g": 16.0}
    assert render("{n:,} / {n:d} / {u:pct} / {g} GiB", names) == "131,072 / 131072 / 12.5% / 16 GiB"
    with pytest.raises(Missing):
        render("{absent}", names)
    assert format_value(9.666) == "9.67"
