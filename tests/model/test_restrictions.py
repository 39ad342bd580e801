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
