"""The one exception the client raises for anything the server or the network refused."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class QuotawebError(Exception):
    """An error answer of the API (`{"error": {"code", "message", "fields"}}`), or a server
    that could not be reached (status None, code CONNECTION_ERROR) or answered something
    that is not the API's JSON (code BAD_RESPONSE).

    `fields` maps each field with a problem to its problems, e.g.
    `{"priority": ["priority must be at most 1000."]}`.
    """

    def __init__(self, status: int | None, code: str, message: str,
                 fields: Mapping[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.fields: dict[str, list[str]] = {key: list(value)
                                             for key, value in (fields or {}).items()}

    def __str__(self) -> str:
        where = f"{self.status} " if self.status is not None else ""
        text = f"{where}{self.code}: {self.message}"
        for field, problems in self.fields.items():
            text += "".join(f"\n  {field}: {problem}" for problem in problems)
        return text

    def __repr__(self) -> str:
        return (f"QuotawebError(status={self.status!r}, code={self.code!r}, "
                f"message={self.message!r}, fields={self.fields!r})")


class WaitTimeout(TimeoutError):
    """`QueuedJob.wait` ran out of time; `last` is the job as it was last seen."""

    def __init__(self, message: str, last: dict[str, Any]) -> None:
        super().__init__(message)
        self.last = last
