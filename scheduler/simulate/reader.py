"""A small typed reader for scenario JSON that names the offending path in every error."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class ScenarioError(ValueError):
    """An invalid scenario file; str() is one line naming the path and the problem."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem


_MISSING = object()


class Reader:
    """Reads fields of one JSON object; every accessor checks type and range."""

    def __init__(self, data: Any, path: str, allowed: set[str] | None = None) -> None:
        if not isinstance(data, dict):
            raise ScenarioError(path, f"must be an object, not {_kind(data)}")
        self.data: dict[str, Any] = data
        self.path = path
        if allowed is not None:
            for key in data:
                if key not in allowed:
                    raise ScenarioError(self.at(key), "unknown field")

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.data

    def _get(self, key: str, default: Any) -> Any:
        value = self.data.get(key, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise ScenarioError(self.at(key), "missing field")
            return default
        return value

    def string(self, key: str, default: Any = _MISSING, *, name: bool = False) -> Any:
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, str):
            raise ScenarioError(self.at(key), f"must be a string, not {_kind(value)}")
        if name and not NAME_PATTERN.match(value):
            raise ScenarioError(self.at(key), "must be 1-128 of A-Z a-z 0-9 _ -")
        return value

    def integer(
        self, key: str, default: Any = _MISSING, *, low: int | None = None, high: int | None = None
    ) -> Any:
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScenarioError(self.at(key), f"must be an integer, not {_kind(value)}")
        if low is not None and value < low:
            raise ScenarioError(self.at(key), f"must be at least {low}, not {value}")
        if high is not None and value > high:
            raise ScenarioError(self.at(key), f"must be at most {high}, not {value}")
        return value

    def boolean(self, key: str, default: Any = _MISSING) -> Any:
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, bool):
            raise ScenarioError(self.at(key), f"must be true or false, not {_kind(value)}")
        return value

    def choice(self, key: str, options: tuple[str, ...], default: Any = _MISSING) -> Any:
        value = self.string(key, default)
        if value is default and default is not _MISSING:
            return value
        if value not in options:
            raise ScenarioError(
                self.at(key), f"unknown value {value!r}; expected one of {', '.join(options)}"
            )
        return value

    def string_set(self, key: str) -> frozenset[str]:
        value = self._get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ScenarioError(self.at(key), "must be a list of strings")
        return frozenset(value)

    def objects(self, key: str, default: Any = _MISSING) -> Iterator[tuple[str, Any]]:
        value = self._get(key, default)
        if not isinstance(value, list):
            raise ScenarioError(self.at(key), f"must be a list, not {_kind(value)}")
        for index, item in enumerate(value):
            yield f"{self.at(key)}[{index}]", item


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"
