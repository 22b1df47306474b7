"""Small typed checks shared by the services: each adds a problem for its field to a
`Problems` collector and returns the value (or None when it is unusable).

Values arrive from JSON bodies, forms and the admin, so types are checked strictly: a
bool is not an integer, and a string is not a number.
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
        span = f"at least {low}" if high == MAX_INT else f"between {low} and {high}"
        problems.add(field, f"{field} must be {span}, not {value}.")
        return None
    return value


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
    if "\x00" in value:
        problems.add(field, f"{field} must not contain NUL characters.")
        return None
    if not min_length <= len(value) <= max_length:
        problems.add(field, f"{field} must be {min_length}-{max_length} characters long.")
        return None
    return value


def pattern(
    problems: Problems, field: str, value: object, regex: re.Pattern[str], rule: str
) -> str | None:
    if not isinstance(value, str) or not regex.fullmatch(value):
        shown = value if isinstance(value, str) else type(value).__name__
        problems.add(field, f"{field} {rule} (got {shown!r}).")
        return None
    return value


def choice(problems: Problems, field: str, value: object, options: tuple[str, ...]) -> str | None:
    if not isinstance(value, str) or value not in options:
        problems.add(field, f"{field} must be one of {', '.join(options)}.")
        return None
    return value


def string_list(
    problems: Problems, field: str, value: object, *, max_items: int = 64, max_length: int = 256
) -> list[str] | None:
    items = list(value) if isinstance(value, list | tuple) else None
    ok = items is not None and len(items) <= max_items and all(
        isinstance(item, str) and "\x00" not in item and len(item) <= max_length
        for item in items
    )
    if items is None or not ok:
        problems.add(field, f"{field} must be a list of at most {max_items} strings of at "
                            f"most {max_length} characters.")
        return None
    return [str(item) for item in items]


def environment(problems: Problems, field: str, value: object) -> dict[str, str] | None:
    """Environment variables for the local executor: names and values are strings that the
    operating system accepts (no '=' in a name, no NUL anywhere)."""
    if not isinstance(value, Mapping):
        problems.add(field, f"{field} must be an object of string names to string values.")
        return None
    result: dict[str, str] = {}
    for name, item in value.items():
        bad_name = not isinstance(name, str) or not name or "=" in name or "\x00" in name
        if bad_name or not isinstance(item, str) or "\x00" in item:
            problems.add(field, f"{field} must map names (non-empty, no '=') to strings; "
                                f"{name!r} does not.")
            return None
        result[name] = item
    return result


def unknown_fields(problems: Problems, given: Mapping[str, Any], known: frozenset[str]) -> None:
    for field in sorted(set(given) - known):
        problems.add(field, f"Unknown field {field}.")
