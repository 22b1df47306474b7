"""Small typed checks shared by the services: each adds a problem for its field to a
`Problems` collector and returns the value (or None when it is unusable).

Values arrive from JSON bodies, forms and the admin, so types are checked strictly: a
bool is not an integer, and a string is not a number.  A job submission is checked by
its pydantic model (submission_schema.py); what is left here is what pydantic does not
do for the other services (a share's, a capacity unit's, a token's changes, which are
compared with stored state field by field) and the wording every refusal shares: how a
refused value is quoted and which characters no column can store.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .errors import Problems

# PostgreSQL's integer columns: anything larger would be a database error, not a 422.
MAX_INT = 2_147_483_647

NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
NAME_RULE = "must be 1-128 of A-Z a-z 0-9 _ -"
UNIT = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
UNIT_RULE = "must be 1-64 of A-Z a-z 0-9 . _ -"

# NUL ends a C string (PostgreSQL refuses it in text) and a lone surrogate (U+D800-U+DFFF,
# which JSON's \uXXXX escapes can spell) cannot be encoded as UTF-8: either would reach
# the database as an error, a 500, so every text a client sends is checked for both.
BAD_CHARACTERS = re.compile("[\x00\ud800-\udfff]")
BAD_CHARACTERS_RULE = "must not contain NUL or unpaired surrogate characters"
# How much of a refused value an error message repeats.
SHOWN_CHARACTERS = 40


def has_bad_characters(value: str) -> bool:
    """Whether `value` holds a NUL or a lone surrogate, which no column can store."""
    return BAD_CHARACTERS.search(value) is not None


def first_bad_text(value: object, where: str = "") -> str | None:
    """The path (`[0]`, `.name`) of the first string inside `value` (a string, or lists
    and objects of them, keys included) that has bad characters ("" for `value` itself, or
    for the object whose key it is); None when there is none."""
    if isinstance(value, str):
        return where if has_bad_characters(value) else None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = first_bad_text(item, f"{where}[{index}]")
            if found is not None:
                return found
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and has_bad_characters(key):
                return where  # a bad key: the object holding it is the place
            step = f"{where}.{shown(key)}" if where else shown(key)
            found = first_bad_text(item, step)
            if found is not None:
                return found
    return None


def shown(value: object, limit: int = SHOWN_CHARACTERS) -> str:
    """A value as an error message repeats it: its repr, cut to `limit` characters, so
    that a refusal never echoes a huge value back in full."""
    text = repr(value) if not isinstance(value, str) else value
    text = BAD_CHARACTERS.sub("\ufffd", text)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def integer(
    problems: Problems, field: str, value: object, low: int, high: int = MAX_INT
) -> int | None:
    """An integer in low..high."""
    if not is_int(value):
        problems.add(field, f"{field} must be an integer.")
        return None
    assert isinstance(value, int)
    if not low <= value <= high:
        if high != MAX_INT:
            span = f"between {low} and {high}"
        else:  # the largest value is the database's, not a rule: name the side broken
            span = f"at least {low}" if value < low else f"at most {high}"
        problems.add(field, f"{field} must be {span}, not {shown_number(value)}.")
        return None
    return value


def shown_number(value: int) -> str:
    """A number as a message quotes it: a very long one cut, with its length."""
    digits = str(value)
    if len(digits) <= 20:
        return digits
    return f"{digits[:12]}… ({len(digits.lstrip('-'))} digits)"


def boolean(problems: Problems, field: str, value: object) -> bool | None:
    if not isinstance(value, bool):
        problems.add(field, f"{field} must be true or false.")
        return None
    return value


def text(
    problems: Problems, field: str, value: object, *, max_length: int, min_length: int = 0
) -> str | None:
    if not isinstance(value, str):
        problems.add(field, f"{field} must be a string.")
        return None
    if has_bad_characters(value):
        problems.add(field, f"{field} {BAD_CHARACTERS_RULE}.")
        return None
    if not min_length <= len(value) <= max_length:
        problems.add(field, f"{field} must be {min_length}-{max_length} characters long.")
        return None
    return value


def pattern(
    problems: Problems, field: str, value: object, regex: re.Pattern[str], rule: str
) -> str | None:
    if not isinstance(value, str) or not regex.fullmatch(value):
        got = repr(shown(value)) if isinstance(value, str) else type(value).__name__
        problems.add(field, f"{field} {rule} (got {got}).")
        return None
    return value


def choice(problems: Problems, field: str, value: object, options: tuple[str, ...]) -> str | None:
    if not isinstance(value, str) or value not in options:
        problems.add(field, f"{field} must be one of {', '.join(options)}.")
        return None
    return value


def unknown_fields(problems: Problems, given: Mapping[str, Any], known: frozenset[str]) -> None:
    for field in sorted(set(given) - known):
        problems.add(shown(field), f"Unknown field {shown(field)}.")
