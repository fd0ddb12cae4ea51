"""Token counting for context budgets.

The default counter is a documented approximation, fast enough for every step: about four characters a
token, the usual figure for English text under BPE tokenizers. Pass any ``Callable[[str], int]`` (for
instance ``lambda s: len(tokenizer.encode(s))``) as the env's ``token_counter`` to count exactly.

>>> approx_tokens("search(\\"Edra Vane\\")")
5
"""

from __future__ import annotations

from typing import Callable

from .checks import is_int, shown

TokenCounter = Callable[[str], int]


def approx_tokens(text: str) -> int:
    """About ``len(text) / 4`` tokens, rounded up."""
    return (len(text) + 3) // 4


class CheckedCounter:
    """A user's ``token_counter`` whose every answer is checked: a count that is not a whole number ``>= 0``
    would corrupt every budget silently, so it stops the env with an error naming ``token_counter``.

    >>> CheckedCounter(len)("four")
    4
    >>> CheckedCounter(lambda text: -1)("four")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: token_counter returned -1 for a text of 4 characters; it must return a whole number >= 0 ...
    """

    def __init__(self, counter: TokenCounter):
        if not callable(counter):
            raise ValueError(
                f"token_counter must be a function from a text to its number of tokens (e.g. "
                f"lambda s: len(tokenizer.encode(s))) or None for the default, got {shown(counter)}"
            )
        self.counter = counter

    def __call__(self, text: str) -> int:
        tokens = self.counter(text)
        if not is_int(tokens) or tokens < 0:
            raise ValueError(
                f"token_counter returned {shown(tokens)} for a text of {len(text)} characters; it must return a "
                "whole number >= 0 (an int), e.g. token_counter=lambda s: len(tokenizer.encode(s))"
            )
        return int(tokens)
