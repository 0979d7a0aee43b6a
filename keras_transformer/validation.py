"""Argument checks shared by layers, models and configs.

Each raises `ValueError` in Keras core's wording: what was wrong, what was expected, and the
value received, naming the argument.
"""

from __future__ import annotations

from typing import Any

_ACTIVATIONS_HINT = "a Keras activation name or callable"


def check_positive_int(name: str, value: Any) -> int:
    """Returns `value` if it is a positive integer, else raises `ValueError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a positive integer. "
            f"Received: {name}={value!r}"
        )
    return value


def check_non_negative_int(name: str, value: Any) -> int:
    """Returns `value` if it is an integer >= 0, else raises `ValueError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a non-negative "
            f"integer. Received: {name}={value!r}"
        )
    return value


def check_rate(name: str, value: Any) -> float:
    """Returns `value` if it is a float in [0, 1), else raises `ValueError`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a float in [0, 1). "
            f"Received: {name}={value!r}"
        )
    return float(value)


def check_positive_float(name: str, value: Any) -> float:
    """Returns `value` if it is a number > 0, else raises `ValueError`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a positive number. "
            f"Received: {name}={value!r}"
        )
    return float(value)


def check_divisible(name: str, value: int, divisor_name: str, divisor: int) -> None:
    """Raises `ValueError` unless `value` is divisible by `divisor`."""
    if value % divisor:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a multiple of "
            f"`{divisor_name}`={divisor}. Received: {name}={value}"
        )
