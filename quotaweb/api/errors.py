"""docs/api.md's error format, `{"error": {"code", "message", "fields"}}`, for every refusal:
the services' errors, request validation, authentication, CSRF, oversized bodies and
unknown paths.  Anything a client can send maps to a 4xx here; only a real bug is a 500."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from ninja import Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError
from pydantic import Field

from ..services.errors import ServiceError, TooManyRequests, summarise
from ..services.values import shown
from .body import NumberTooLarge

if TYPE_CHECKING:
    from ninja import NinjaAPI

MAX_BODY_BYTES = 1024 * 1024
MAX_FIELDS_SHOWN = 20


class ApiError(Exception):
    """A refusal decided in the API layer itself (authentication, CSRF, a bad cursor)."""

    def __init__(self, status: int, code: str, message: str,
                 fields: Mapping[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.fields = dict(fields or {})


class ErrorDetail(Schema):
    code: str = Field(description="A machine-readable code, e.g. VALIDATION_ERROR.")
    message: str = Field(description="One sentence for a person.")
    fields: dict[str, list[str]] = Field(
        description="Each field with a problem, and its problems (empty when none applies).")


class ErrorOut(Schema):
    error: ErrorDetail


# The statuses an operation may refuse with (docs/api.md, Errors), documented on each one.
READ_ERRORS = (401, 404, 422)
WRITE_ERRORS = (400, 401, 403, 404, 409, 413, 422)
ERROR_DESCRIPTIONS = {
    400: "Malformed JSON",
    401: "Not signed in, or the bearer token is unknown or revoked",
    403: "Not allowed for this user, or the CSRF check failed",
    404: "No such object",
    409: "Conflict with the current state",
    413: "Body over 1 MiB",
    429: "Over a rate limit (see Retry-After)",
    422: "Invalid values or unknown fields",
}


def error_responses(statuses: Iterable[int]) -> dict[int, type[ErrorOut]]:
    return dict.fromkeys(statuses, ErrorOut)


def error_body(code: str, message: str, fields: Mapping[str, list[str]] | None = None
               ) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fields": dict(fields or {})}}


def error_response(status: int, code: str, message: str,
                   fields: Mapping[str, list[str]] | None = None) -> JsonResponse:
    return JsonResponse(error_body(code, message, fields), status=status)


def too_large() -> JsonResponse:
    return error_response(413, "BODY_TOO_LARGE",
                          f"The request body is over {MAX_BODY_BYTES} bytes (1 MiB).")


# Validation errors from pydantic ------------------------------------------------------


def field_name(location: Iterable[Any]) -> str:
    """`("body", "payload", "capacity_limits", 0, "max_capacity")` reads as
    `capacity_limits[0].max_capacity`, as the services name nested fields."""
    parts = list(location)
    if parts and parts[0] == "body":
        parts = parts[2:]  # ("body", "payload", ...): the body is the one payload
    elif parts and parts[0] in ("query", "path"):
        parts = parts[1:]
        # ninja names a grouped parameter by its group ("filters", "status", 0) when the
        # error is inside it: parameters are flat, so the group's name is noise.
        if len(parts) >= 2 and isinstance(parts[0], str) and isinstance(parts[1], str):
            parts = parts[1:]
    name = ""
    for part in parts:
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += f".{shown(part)}" if name else shown(part)
    return name or "body"


# pydantic's error types, said the way the services say them.
TYPE_PROBLEMS = {
    "int_type": "must be an integer", "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "bool_type": "must be true or false", "bool_parsing": "must be true or false",
    "string_type": "must be a string", "list_type": "must be a list",
    "dict_type": "must be an object", "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "literal_error": "is not one of the allowed values",
    "enum": "is not one of the allowed values",
    "string_unicode": "must not contain unpaired surrogate characters",
}


def problem(error: Mapping[str, Any], field: str) -> str:
    kind = error.get("type", "")
    leaf = field if field != "body" else "The body"
    if kind == "bad_text":  # RequestBody's check: its message names the inner place
        return str(error.get("msg"))
    if kind == "extra_forbidden":
        return f"Unknown field {leaf}."
    if kind == "missing":
        return f"{leaf} is required."
    if kind in TYPE_PROBLEMS:
        return f"{leaf} {TYPE_PROBLEMS[kind]}."
    return f"{leaf}: {str(error.get('msg', 'invalid value')).rstrip('.')}."


def validation_fields(errors: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    for error in errors:
        name = field_name(error.get("loc", ()))
        if error.get("type") == "bad_text":  # names the string inside the field
            name = str(error.get("ctx", {}).get("field", name))
        fields.setdefault(name, []).append(problem(error, name))
    return fields


# Handlers -----------------------------------------------------------------------------


def install_handlers(api: NinjaAPI) -> None:
    """Replace ninja's default bodies (`{"detail": ...}`) with docs/api.md's error format."""

    def respond(status: int, body: dict[str, Any]) -> HttpResponse:
        return JsonResponse(body, status=status)

    @api.exception_handler(ServiceError)
    def service_error(request: HttpRequest, exc: ServiceError) -> HttpResponse:
        response = respond(exc.status, exc.as_dict())
        if isinstance(exc, TooManyRequests):
            response["Retry-After"] = str(exc.retry_after)
        return response

    @api.exception_handler(ApiError)
    def api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
        return respond(exc.status, error_body(exc.code, exc.message, exc.fields))

    @api.exception_handler(ValidationError)
    def invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
        fields = validation_fields(exc.errors)
        # A list of 10,000 bad items would make 10,000 entries: the first ones say enough,
        # and the message counts them all.
        shown = dict(list(fields.items())[:MAX_FIELDS_SHOWN])
        return respond(422, error_body("VALIDATION_ERROR", summarise(fields), shown))

    @api.exception_handler(AuthenticationError)
    def unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
        return respond(401, error_body(
            "NOT_AUTHENTICATED", "Sign in, or send Authorization: Bearer <token>."))

    @api.exception_handler(HttpError)
    def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
        if isinstance(exc.__cause__, NumberTooLarge):  # valid JSON, but no field takes it
            fields = {exc.__cause__.field: [
                f"{exc.__cause__.field} is a number of {exc.__cause__.digits} digits, too "
                f"large for any field."]}
            return respond(422, error_body("VALIDATION_ERROR", summarise(fields), fields))
        if exc.status_code == 400:  # ninja's only 400: a body that is not JSON
            return respond(400, error_body("MALFORMED_JSON",
                                           "The request body is not valid JSON."))
        return respond(exc.status_code, error_body(f"HTTP_{exc.status_code}", str(exc)))

    @api.exception_handler(RequestDataTooBig)
    def too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
        return too_large()

    @api.exception_handler(Http404)
    def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
        return respond(404, error_body("NOT_FOUND", "No such object."))
