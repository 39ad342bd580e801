import numpy as np
import pytest

from mpitune.model.restrictions import Restriction, RestrictionError

NAMES = ["x", "y", "kind"]
COLS = {"x": np.array([1, 2, 4, 8]), "y": np.array([8, 4, 2, 1]), "kind": np.array(["a", "b", "a", "b"], dtype=object)}


@pytest.mark.parametrize(
    "text,expected",
    [
        ("x * y <= 8", [True, True, True, True]),
        ("x < y", [True, True, False, False]),
        ("x > 1 and y > 1", [False, True, True, False]),
        ("x == 1 or not y < 2", [True, True, True, False]),
        ("1 < x < 8", [False, True, True, False]),
        ("kind == 'a'", [True, False, True, False]),
        ("max(x, y) == 8", [True, False, False, True]),
        ("(x if kind == 'a' else y) >= 4", [False, True, True, False]),
        ("x % 4 == 0", [False, False, True, True]),
    ],
)
def test_vectorised_evaluation_matches_python(text, expected):
    r = Restriction(text, NAMES)
    assert list(r.evaluate(COLS)) == expected
    for i, want in enumerate(expected):  # the same answer Python's eval gives row by row
        row = {k: v[i] for k, v in COLS.items()}
        assert bool(eval(text, {"max": max}, row)) == want


@pytest.mark.parametrize(
    "text,phrase",
    [
        ("x >", "does not parse"),
        ("z > 1", "names z"),
        ("open('f')", "calls"),
        ("x.real > 1", "Attribute"),
        ("x in [1, 2]", "'in'"),
    ],
)
def test_bad_restrictions_are_refused(text, phrase):
    with pytest.raises(RestrictionError, match=phrase):
        Restriction(text, NAMES)


@pytest.mark.parametrize("text", ["2**(x - 3) < 1", "x**-1 >= 0.25", "(y - x)**2 > 9", "2**x * x**-2 == 2"])
def test_integer_powers_are_pythons(text):
    """numpy refuses an integer to a negative power; Python (Kernel Tuner's eval) gives a float."""
    expected = [bool(eval(text, {}, {k: v.tolist()[i] for k, v in COLS.items()})) for i in range(4)]
    assert list(Restriction(text, NAMES).evaluate(COLS)) == expected


@pytest.mark.parametrize(
    "text,phrase",
    [
        ("x**-1 > 0", "'x**-1 > 0' failed on {'x': 0}: ZeroDivisionError: 0 cannot be raised to a negative power"),
        ("x**(10**10) > 1", "failed on {'x': 3}: OverflowError: an integer power past 64 bits"),  # not wrapped around
        ("kind < 1", "'kind < 1' failed on {'kind': 'a'}: TypeError: '<' not supported"),
        ("float(10**400) > x", "OverflowError: int too large to convert to float"),
    ],
)
def test_a_restriction_failing_on_some_values_names_them(text, phrase):
    cols = {
        "x": np.array([1, 3, 0, 2]),
        "y": np.array([1, 2, 3, 4]),
        "kind": np.array(["a", "b", "a", "b"], dtype=object),
    }
    with pytest.raises(RestrictionError) as err:
        Restriction(text, NAMES).evaluate(cols)
    assert phrase in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "text,phrase",
    [
        ("3**(10**10) > x", "computes 3 ** 10 ** 10, about 1.58e+10 bits long"),
        ("(10**10)**(10**10) > x", "computes (10 ** 10) ** 10 ** 10"),
        ("x < 1 << 10**400", "more than 1e300 bits long"),
        ("kind == 'a' * 10**10", "about 1e+10 characters long"),
        ("max(x, -(2**(1 << 20))) > 0", "computes 2 ** (1 << 20)"),
    ],
)
def test_constant_arithmetic_too_costly_to_evaluate_is_refused(text, phrase):
    """One Python operation on huge integers cannot be interrupted, by the load deadline or anything."""
    with pytest.raises(RestrictionError, match="would take too long to evaluate") as err:
        Restriction(text, NAMES)
    assert phrase in str(err.value)


def test_constant_arithmetic_within_bounds_is_exact():
    assert list(Restriction("x < 2**100 // 2**98", NAMES).evaluate(COLS)) == [True, True, False, False]
