"""Argument checks shared by the env, its sites and its token counter: one clear line naming the argument.

>>> check_int("max_sessions", 4, minimum=1)
4
>>> check_int("max_sessions", True, minimum=1)
Traceback (most recent call last):
...
ValueError: max_sessions must be a whole number >= 1 (an int, not a bool), got True
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

SHOWN_CHARS = 80


def is_int(value: Any) -> bool:
    """A whole number (``int`` or a NumPy integer), but not a bool: ``True`` is an ``int`` in Python, yet never
    a count a user meant."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` as an ``int`` when it is a whole number ``>= minimum``; a ``ValueError`` naming ``name`` otherwise."""
    if not is_int(value) or value < minimum:
        raise ValueError(f"{name} must be a whole number >= {minimum} (an int, not a bool), got {shown(value)}")
    return int(value)


def check_bool(name: str, value: Any) -> bool:
    """``value`` when it is ``True`` or ``False``; a ``ValueError`` naming ``name`` otherwise (a string such as
    ``'no'`` is truthy, so it would silently mean ``True``)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {shown(value)}")
    return bool(value)


def shown(value: Any) -> str:
    """``repr(value)`` cut to a readable length; a long int is described by its size instead (``repr`` itself
    raises past 4,300 digits).

    >>> shown(10 ** 5000)
    'an int of about 5001 digits'
    """
    if is_int(value) and abs(int(value)).bit_length() > 4 * SHOWN_CHARS:
        return f"an int of about {int(abs(int(value)).bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."
