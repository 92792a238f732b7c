"""Stage 13's checks of length_penalty: the formula ((5 + length) / 6) ** alpha and its classic mistakes."""
from __future__ import annotations

import math

from ..registry import CheckFailure, register
from ._util import fmt
from .stage13_decoding import _as_number


def _lp_number(length_penalty, length, alpha):
    what = f"length_penalty({length}, {alpha})"
    got = length_penalty(length, alpha)
    try:
        return _as_number(got), what
    except (TypeError, ValueError, RuntimeError):
        raise CheckFailure(what, "a number", fmt(got), "return ((5 + length) / 6) ** alpha") from None


LP_MISTAKES = {
    "the exponent is missing: ((5 + length) / 6) ** alpha": lambda n, a: (5 + n) / 6,
    "only the numerator is raised to alpha: ((5 + length) / 6) ** alpha, parentheses around the quotient":
        lambda n, a: (5 + n) ** a / 6,
    "the exponent's sign is flipped: ((5 + length) / 6) ** alpha": lambda n, a: ((5 + n) / 6) ** -a,
    "length ** alpha: the penalty of Wu et al. 2016 is ((5 + length) / 6) ** alpha": lambda n, a: n ** a,
    "divided by 5 instead of 6: ((5 + length) / 6) ** alpha": lambda n, a: ((5 + n) / 5) ** a,
    "(1 + length) instead of (5 + length): ((5 + length) / 6) ** alpha": lambda n, a: ((1 + n) / 6) ** a,
    "only 6 is raised to alpha: (5 + length) / 6 ** alpha is (5 + length) / (6 ** alpha); put parentheses "
    "around the quotient": lambda n, a: (5 + n) / 6 ** a,
    "multiplied by alpha instead of raised to it: ((5 + length) / 6) ** alpha": lambda n, a: (5 + n) / 6 * a,
    "integer division: ((5 + length) / 6) ** alpha with /, not //": lambda n, a: ((5 + n) // 6) ** a,
    "length and alpha swapped: ((5 + length) / 6) ** alpha": lambda n, a: ((5 + a) / 6) ** n,
    "5 + length / 6 divides only length (operator precedence): put parentheses around (5 + length)":
        lambda n, a: (5 + n / 6) ** a,
    "the alpha argument is ignored (0.6 used)": lambda n, a: ((5 + n) / 6) ** 0.6,
    "the logarithm of the penalty: alpha * log((5 + length) / 6) is log(length_penalty); return "
    "((5 + length) / 6) ** alpha": lambda n, a: a * math.log((5 + n) / 6),
}


def _expect_lp(length_penalty, length, alpha):
    got, what = _lp_number(length_penalty, length, alpha)
    expected = ((5 + length) / 6) ** alpha
    if math.isclose(got, expected, rel_tol=1e-6):  # (float32 arithmetic is right too)
        return
    hint = "; or ".join(d for d, f in LP_MISTAKES.items()
                        if math.isclose(got, f(length, alpha), rel_tol=1e-6, abs_tol=1e-12)) or \
        "((5 + length) / 6) ** alpha"
    raise CheckFailure(what, f"{expected:.6g}", f"{got:.6g}", hint)


@register("length_penalty", "equals ((5 + length) / 6) ** alpha")
def _lp_formula(length_penalty):
    for length, alpha in ((7, 0.6), (10, 1.0), (3, 1.5), (20, 0.6), (2, 2.0)):
        _expect_lp(length_penalty, length, alpha)


@register("length_penalty", "is 1 for alpha = 0 (no penalty) and for length 1")
def _lp_ones(length_penalty):
    for length, alpha in ((9, 0.0), (1, 0.6), (1, 2.0)):
        _expect_lp(length_penalty, length, alpha)


@register("length_penalty", "grows with the length and with alpha")
def _lp_grows(length_penalty):
    for alpha in (0.6, 1.2):
        values = [_lp_number(length_penalty, n, alpha)[0] for n in range(1, 12)]
        if any(b <= a for a, b in zip(values, values[1:])):
            raise CheckFailure(f"length_penalty(1..11, {alpha})", "increasing with the length", fmt(values),
                               "((5 + length) / 6) ** alpha: longer hypotheses get a larger divisor")
    a, b = _lp_number(length_penalty, 10, 0.5)[0], _lp_number(length_penalty, 10, 1.0)[0]
    if not b > a:
        raise CheckFailure("length_penalty(10, 0.5) < length_penalty(10, 1.0)", "True",
                           f"{a:.4g} and {b:.4g}",
                           "use alpha as the exponent: ((5 + length) / 6) ** alpha")
