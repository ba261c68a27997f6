"""Value types for the CLI's numeric options, so that argparse refuses a count, a rate or a
length that would do nothing (or divide by zero minutes later) before a command starts.

Must not: know a command; each type checks one value and says what it must be.
"""

from __future__ import annotations

import argparse
import math


def _number(text: str, kind: type[int] | type[float]) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not {'a whole number' if kind is int else 'a number'}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def count(text: str) -> int:
    """A whole number of at least 1 (rows, rounds, repeats, machines).

    >>> count("3")
    3
    >>> count("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: 0 is not at least 1
    """
    value = int(_number(text, int))
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def positive(text: str) -> float:
    """A finite number above 0 (tweets/s, seconds).

    >>> positive("2.5")
    2.5
    >>> positive("-1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: -1.0 is not above 0
    >>> positive("nan")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: 'nan' is not a finite number
    """
    value = _number(text, float)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not above 0")
    return value


def not_negative(text: str) -> float:
    """A finite number of at least 0 (a warm-up that may be skipped).

    >>> not_negative("0")
    0.0
    """
    value = _number(text, float)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is below 0")
    return value


def share(text: str) -> float:
    """A share above 0 and at most 1.

    >>> share("0.01")
    0.01
    >>> share("1.5")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: 1.5 is not a share above 0 and at most 1
    """
    value = _number(text, float)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{value} is not a share above 0 and at most 1")
    return value
