"""The shared argument checks of :mod:`asrdecode.errors`: ``check_int`` and ``check_number``."""

from __future__ import annotations

import math

import pytest

from asrdecode.errors import DecodingInputError, check_int, check_number

# (value, keyword arguments, accepted?)
INT_TABLE = [
    (1, {}, True), (-5, {}, True), (0, {"low": 0}, True), (0, {"low": 1}, False), (3, {"low": 1, "high": 3}, True),
    (4, {"low": 1, "high": 3}, False), (7, {"high": 7}, True), (8, {"high": 7}, False),
    (True, {}, False), (False, {"low": 0}, False), (1.0, {}, False), ("1", {}, False), (None, {}, False),
    (None, {"optional": True}, True), (0, {"low": 1, "optional": True}, False), (10**30, {"low": 1}, True),
]


@pytest.mark.parametrize("value, kwargs, ok", INT_TABLE)
def test_check_int_table(value, kwargs, ok):
    if ok:
        assert check_int("n", value, **kwargs) is value
    else:
        with pytest.raises(DecodingInputError, match=r"^n must be an int"):
            check_int("n", value, **kwargs)


NUMBER_TABLE = [
    (0.5, {}, True), (-3, {}, True), (0, {"low": 0}, True), (0.0, {"low": 0, "low_open": True}, False),
    (1e-9, {"low": 0, "low_open": True}, True), (-0.1, {"low": 0}, False), (2.0, {"high": 1}, False),
    (1.0, {"low": 0, "high": 1}, True), (math.nan, {}, False), (math.inf, {}, False), (-math.inf, {}, False),
    (math.inf, {"finite": False}, True), (math.inf, {"finite": False, "high": 5}, False),
    (math.nan, {"finite": False}, False), (True, {}, False), ("0.5", {}, False), (None, {}, False),
    (None, {"optional": True}, True), (10**400, {}, False), (10**400, {"finite": False}, False),
]


@pytest.mark.parametrize("value, kwargs, ok", NUMBER_TABLE)
def test_check_number_table(value, kwargs, ok):
    if ok:
        assert check_number("x", value, **kwargs) is value
    else:
        with pytest.raises(DecodingInputError, match=r"^x must be a (finite )?number"):
            check_number("x", value, **kwargs)


@pytest.mark.parametrize("call, message", [
    (lambda: check_int("beam", 0, low=1), "beam must be an int >= 1, got 0"),
    (lambda: check_int("nbest", 5, low=1, high=4), "nbest must be an int in 1..4, got 5"),
    (lambda: check_int("max_symbols", True, low=1, optional=True), "max_symbols must be an int >= 1 or None, got True"),
    (lambda: check_number("gamma", -1, low=0), "gamma must be a finite number >= 0, got -1"),
    (lambda: check_number("t", 0, low=0, low_open=True, finite=False), "t must be a number > 0, got 0"),
    (lambda: check_number("w", 9.5, low=0, low_open=True, high=2.5), "w must be a finite number > 0 and <= 2.5, got 9.5"),
    (lambda: check_number("p", 2, low=0, high=1), "p must be a finite number in 0..1, got 2"),
])
def test_messages_name_the_argument_and_the_range(call, message):
    with pytest.raises(DecodingInputError) as info:
        call()
    assert str(info.value) == message


def test_error_type_is_the_callers():
    with pytest.raises(TypeError, match="k must be an int >= 1"):
        check_int("k", 0, low=1, error=TypeError)
    with pytest.raises(KeyError):
        check_number("k", math.nan, error=KeyError)
