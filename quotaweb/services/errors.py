"""The errors a service raises, each carrying what docs/api.md's error body needs:
`{"error": {"code", "message", "fields"}}` and the HTTP status it maps to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

FieldErrors = dict[str, list[str]]


class ServiceError(Exception):
    """A refused action: nothing was changed."""

    status = 400
    default_code = "BAD_REQUEST"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        fields: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.fields: FieldErrors = {key: list(value) for key, value in (fields or {}).items()}

    def as_dict(self) -> dict[str, object]:
        """docs/api.md's error body."""
        return {"error": {"code": self.code, "message": self.message, "fields": self.fields}}


class ValidationFailed(ServiceError):
    """Invalid values (422): `fields` names each field and its problems."""

    status = 422
    default_code = "VALIDATION_ERROR"

    def __init__(
        self,
        fields: Mapping[str, Sequence[str]],
        message: str | None = None,
        *,
        code: str | None = None,
    ) -> None:
        super().__init__(message or summarise(fields), code=code, fields=fields)


class ConfigurationError(ValidationFailed):
    """An invalid capacity or quota-share configuration (422); `fields` names each field
    with its problems, so a form, the admin or the API shows them where they belong."""

    def __init__(self, fields: Mapping[str, Sequence[str]], message: str | None = None) -> None:
        super().__init__(fields, message, code="INVALID_CONFIGURATION")


class Conflict(ServiceError):
    """The action conflicts with the current state (409): a DISABLED share, a terminal
    job, a client_token reused with another body, a share that is not DISABLED."""

    status = 409
    default_code = "CONFLICT"

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message, code=code)


class TooManyRequests(ServiceError):
    """Over a rate limit (429): try again after `retry_after` seconds."""

    status = 429
    default_code = "TOO_MANY_REQUESTS"

    def __init__(self, code: str, message: str, *, retry_after: int) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


class NotFound(ServiceError):
    status = 404
    default_code = "NOT_FOUND"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message, code=code)


class Forbidden(ServiceError):
    status = 403
    default_code = "FORBIDDEN"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message, code=code)


def summarise(fields: Mapping[str, Sequence[str]]) -> str:
    """One sentence for a person: the first problem, and how many more there are."""
    problems = [(name, text) for name, texts in fields.items() for text in texts]
    if not problems:
        return "The request is invalid."
    first = problems[0][1]
    more = len(problems) - 1
    return first if not more else f"{first} (and {more} more problem{'s' * (more > 1)})"


class Problems:
    """Collects field errors so that a caller sees every problem at once."""

    def __init__(self) -> None:
        self.fields: FieldErrors = {}

    def add(self, field: str, message: str) -> None:
        self.fields.setdefault(field, []).append(message)

    def merge(self, fields: Mapping[str, Sequence[str]]) -> None:
        for field, messages in fields.items():
            for message in messages:
                self.add(field, message)

    def __contains__(self, field: str) -> bool:
        return field in self.fields

    def __bool__(self) -> bool:
        return bool(self.fields)
