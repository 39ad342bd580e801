"""The one check of a number a user sets, which flags, environment variables and spec fields share."""

from __future__ import annotations

import argparse

import pytest

from mpitune.errors import UserError, checked_number, environment_number, number_flag


@pytest.mark.parametrize(
    "value,zero_ok,says",
    [
        ("nan", True, "not a finite number: 'nan'"),
        ("inf", False, "not a finite number: 'inf'"),
        ("-inf", True, "not a finite number"),
        (float("nan"), False, "not a finite number: nan"),
        ("-1", True, "must be at least 0, got '-1'"),
        ("0", False, "must be greater than 0, got '0'"),
        ("soon", True, "not a number: 'soon'"),
        ("", True, "not a number: ''"),
    ],
)
def test_nan_inf_negatives_and_words_are_refused_with_the_reason(value, zero_ok, says):
    with pytest.raises(ValueError, match="^" + says.replace("(", r"\(")):
        checked_number(value, zero_ok)


def test_numbers_in_range_are_taken():
    assert checked_number("0", zero_ok=True) == 0.0
    assert checked_number(" 2.5 ") == 2.5
    assert checked_number(7) == 7.0


def test_a_flag_says_the_reason_through_argparse():
    with pytest.raises(argparse.ArgumentTypeError, match="not a finite number: 'nan'"):
        number_flag()("nan")
    assert number_flag(zero_ok=True)("0") == 0.0


def test_an_environment_variable_is_named_with_its_value_never_replaced_by_the_default():
    assert environment_number("MPITUNE_X_S", 5.0, environ={}) == 5.0
    assert environment_number("MPITUNE_X_S", 5.0, environ={"MPITUNE_X_S": "  "}) == 5.0
    assert environment_number("MPITUNE_X_S", 5.0, zero_ok=True, environ={"MPITUNE_X_S": "0"}) == 0.0
    with pytest.raises(UserError) as refused:
        environment_number("MPITUNE_X_S", 5.0, environ={"MPITUNE_X_S": "nan"})
    assert str(refused.value) == "environment variable MPITUNE_X_S: not a finite number: 'nan'"
