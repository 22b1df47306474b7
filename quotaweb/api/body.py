"""Reading a request's JSON body (docs/api.md, Errors).

Python refuses to turn more than sys.get_int_max_str_digits() digits (4,300) into an int,
so `json.loads` fails on such a number although the JSON is valid, and ninja would call
the body malformed.  No field takes a number that large: the parser names the field that
holds it instead, and the API answers 422 (errors.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest
from ninja.parser import Parser

from ..services.values import shown


@dataclass(frozen=True)
class _Huge:
    """Where an integer too long to convert stood in the parsed body."""

    digits: int


class NumberTooLarge(ValueError):
    """A valid JSON integer with more digits than any field takes."""

    def __init__(self, field: str, digits: int) -> None:
        super().__init__(f"{field} is a number of {digits} digits")
        self.field, self.digits = field, digits


def _places(data: Any) -> Iterator[tuple[str, Any]]:
    """Every value in the body with its field's name (`limits[0].max_capacity`), walked
    without recursion: the body may be nested as deep as the JSON scanner allows."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        name, value = stack.pop()
        yield name or "body", value
        if isinstance(value, dict):
            stack += [(f"{name}.{shown(key)}" if name else shown(key), item)
                      for key, item in value.items()]
        elif isinstance(value, list):
            stack += [(f"{name}[{index}]", item) for index, item in enumerate(value)]


class BodyParser(Parser):
    def parse_body(self, request: HttpRequest) -> Any:
        huge: list[_Huge] = []

        def integer(text: str) -> int | _Huge:
            try:
                return int(text)
            except ValueError:  # only the digit limit: the JSON scanner let a valid int by
                huge.append(_Huge(len(text.lstrip("-"))))
                return huge[-1]

        data = json.loads(request.body, parse_int=integer)
        if huge:  # rare: only then is the body walked to name the field
            for field, value in _places(data):
                if isinstance(value, _Huge):
                    raise NumberTooLarge(field, value.digits)
        return data
