"""Value types for the CLI's numeric options, so that argparse refuses a count, a rate or a
length that would do nothing (or divide by zero minutes later) before a command starts.

Must not: know a command; each type checks one value and says what it must be.
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable


def _number(text: str, kind: type[int] | type[float]) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not {'a whole number' if kind is int else 'a number'}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _checked(text: str, kind: type[int] | type[float], ok: Callable[[float], bool],
             fails: str) -> float:
    value = _number(text, kind)
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{value} {fails}")
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
    return int(_checked(text, int, lambda v: v >= 1, "is not at least 1"))


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
    return _checked(text, float, lambda v: v > 0, "is not above 0")


def not_negative(text: str) -> float:
    """A finite number of at least 0 (a warm-up that may be skipped).

    >>> not_negative("0")
    0.0
    """
    return _checked(text, float, lambda v: v >= 0, "is below 0")


def share(text: str) -> float:
    """A share above 0 and at most 1.

    >>> share("0.01")
    0.01
    >>> share("1.5")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: 1.5 is not a share above 0 and at most 1
    """
    return _checked(text, float, lambda v: 0 < v <= 1, "is not a share above 0 and at most 1")
