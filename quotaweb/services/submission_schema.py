"""The one source of what a job submission carries (docs/semantics.md 4, docs/api.md POST
/jobs): its fields, their defaults and their constraints, as a pydantic model.

The API's request body (api/schemas/jobs.py) is derived from it, the browser's submit
form takes its defaults and ranges from it, the services validate every submission (the
API's, a form's, a batch's, the admin's priority) with it, and `problems` says its
refusals in the words users have always read ("priority must be between 0 and 9999, not
10000.").  What depends on the quota share (the unit is one of its limits, keep-alive
within its cap) is a second step, in services/submission.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Annotated, Any

from annotated_types import Ge, Le, MaxLen, MinLen
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from .values import (
    BAD_CHARACTERS_RULE,
    MAX_INT,
    NAME,
    NAME_RULE,
    has_bad_characters,
    shown,
    shown_number,
)

MAX_PRIORITY = 9999
MAX_RETRY_ATTEMPTS = 10
MAX_CLIENT_TOKEN = 64
MAX_COMMAND = 100_000
MAX_TEXT = 256
MAX_LIST_ITEMS = 64

LIST_RULE = (f"must be a list of at most {MAX_LIST_ITEMS} strings of at most {MAX_TEXT} "
             "characters")
ENVIRONMENT_TYPE_RULE = "must be an object of string names to string values"


def _storable(value: str) -> str:
    """No NUL and no lone surrogate: no column can store them (services/values.py)."""
    if has_bad_characters(value):
        raise PydanticCustomError("bad_text", BAD_CHARACTERS_RULE)
    return value


def _environment_names(value: dict[str, str]) -> dict[str, str]:
    """Names the operating system accepts: non-empty, without '='."""
    for name in value:
        if not name or "=" in name:
            raise PydanticCustomError("environment_name", "bad name {name}", {"name": name})
    return value


Text = Annotated[str, AfterValidator(_storable)]
ListItem = Annotated[str, StringConstraints(max_length=MAX_TEXT), AfterValidator(_storable)]
Environment = Annotated[dict[Text, Text], AfterValidator(_environment_names)]


def workload_problems(fields: Mapping[str, Any]) -> dict[str, list[str]]:
    """Exactly one of command (local executor) and duration_seconds (simulated), and a
    command that is not blank."""
    command, duration = fields.get("command"), fields.get("duration_seconds")
    has_command = command is not None and command != ""
    if has_command == (duration is not None):
        message = ("Give either command or duration_seconds, not both." if has_command else
                   "Give command (local executor) or duration_seconds (simulated executor).")
        return {"command": [message], "duration_seconds": [message]}
    if isinstance(command, str) and has_command and not command.strip():
        return {"command": ["command must not be blank."]}
    return {}


class Submission(BaseModel):
    """A job submission.  Strict, as JSON bodies, forms and the admin all are: a bool is
    not an integer and "5" is not a number; an unknown field is refused."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(pattern=NAME.pattern)
    quota_share: str = Field(pattern=NAME.pattern)
    instance_type: str = Field(description="One of the quota share's capacity units.",
                               json_schema_extra={"maxLength": 64})
    priority: int = Field(0, ge=0, le=MAX_PRIORITY, description="Higher runs first.")
    instance_count: int = Field(1, ge=1, le=MAX_INT)
    keep_alive_seconds: int = Field(
        0, ge=0, le=MAX_INT, description="0 up to the quota share's max_keep_alive_seconds.")
    role: Text = Field("", max_length=MAX_TEXT)
    volume_size_gb: int = Field(0, ge=0, le=MAX_INT)
    volume_kms_key_id: Text = Field("", max_length=MAX_TEXT)
    security_group_ids: list[ListItem] = Field(default_factory=list, max_length=MAX_LIST_ITEMS)
    subnets: list[ListItem] = Field(default_factory=list, max_length=MAX_LIST_ITEMS)
    enable_network_isolation: bool = False
    enable_inter_container_traffic_encryption: bool = False
    retry_attempts: int = Field(1, ge=1, le=MAX_RETRY_ATTEMPTS,
                                description="All attempts, the first included.")
    preemption_retries_before_termination: int | None = Field(
        None, ge=0, le=MAX_INT,
        description="null: unlimited; r: FAILED at the (r+1)-th preemption.")
    max_runtime_seconds: int = Field(86_400, ge=1, le=MAX_INT, description="Per attempt.")
    min_runtime_seconds: int | None = Field(
        None, ge=0, le=MAX_INT,
        description="null: the quota share's; else up to the share's min_runtime_seconds: "
                    "how long an attempt runs before it may be preempted.")
    environment: Environment = Field(default_factory=dict)
    command: Text | None = Field(None, max_length=MAX_COMMAND,
                                 description="A shell command (local executor).")
    duration_seconds: int | None = Field(None, ge=0, le=MAX_INT,
                                         description="Simulated executor.")
    client_token: Text | None = Field(
        None, min_length=1, max_length=MAX_CLIENT_TOKEN,
        description="Makes the submission idempotent for the submitting user.")

    @model_validator(mode="after")
    def _one_workload(self) -> Submission:
        found = workload_problems(self.__dict__)
        if found:
            raise PydanticCustomError("workload", "{problems}", {"problems": found})
        return self


REQUIRED = ("name", "quota_share", "instance_type")
# Every optional field with its default (docs/api.md POST /jobs).
DEFAULTS: dict[str, Any] = {
    name: field.get_default(call_default_factory=True)
    for name, field in Submission.model_fields.items() if not field.is_required()
}
FIELDS = frozenset(Submission.model_fields)


def bounds(field: str) -> tuple[int | None, int | None]:
    """A number field's smallest and largest allowed values."""
    low = high = None
    for rule in Submission.model_fields[field].metadata:
        if isinstance(rule, Ge):
            low = int(rule.ge)  # type: ignore[call-overload]
        elif isinstance(rule, Le):
            high = int(rule.le)  # type: ignore[call-overload]
    return low, high


def _lengths(field: str) -> tuple[int, int | None]:
    low, high = 0, None
    for rule in Submission.model_fields[field].metadata:
        if isinstance(rule, MinLen):
            low = rule.min_length
        elif isinstance(rule, MaxLen):
            high = rule.max_length
    return low, high


# Refusals, in users' words -------------------------------------------------------------


def _range(field: str, value: object) -> str:
    low, high = bounds(field)
    if high is not None and high != MAX_INT:
        span = f"between {low} and {high}"
    else:  # the largest value is the database's, not a rule: name the side broken
        assert isinstance(value, int)
        span = f"at least {low}" if low is not None and value < low else f"at most {high}"
    number = shown_number(value) if isinstance(value, int) else shown(value)
    return f"{field} must be {span}, not {number}."


def _message(field: str, error: Mapping[str, Any]) -> str:
    """One pydantic error about `field` (a top-level field) as the services say it."""
    kind, value = error["type"], error.get("input")
    if kind == "missing":
        return f"{field} is required."
    if field in ("name", "quota_share"):
        got = repr(shown(value)) if isinstance(value, str) else type(value).__name__
        return f"{field} {NAME_RULE} (got {got})."
    if field in ("security_group_ids", "subnets"):
        return f"{field} {LIST_RULE}."
    if field == "environment":
        # A bad name says so in its context; a bad value (or key) sits at ("environment",
        # name, ...); anything else is not an object of strings.
        if kind == "environment_name":
            name = error["ctx"]["name"]
        elif len(error["loc"]) > 1:
            name = error["loc"][1]
        else:
            return f"{field} {ENVIRONMENT_TYPE_RULE}."
        return (f"{field} must map names (non-empty, no '=') to strings without NUL or "
                f"unpaired surrogates; {shown(name)!r} does not.")
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"{field} must be an integer."
    if kind in ("greater_than_equal", "less_than_equal"):
        return _range(field, value)
    if kind in ("bool_type", "bool_parsing"):
        return f"{field} must be true or false."
    if kind == "string_type":
        return f"{field} must be a string."
    if kind == "bad_text":
        return f"{field} {BAD_CHARACTERS_RULE}."
    # An optional text's lengths are checked as "too_long", a plain one's as "string_...".
    if kind in ("string_too_long", "string_too_short", "too_long", "too_short"):
        low, high = _lengths(field)
        return f"{field} must be {low}-{high} characters long."
    return f"{field}: {str(error.get('msg', 'invalid value')).rstrip('.')}."


def problems(error: ValidationError) -> dict[str, list[str]]:
    """A refused Submission's problems, per field, each said once."""
    found: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        if message not in found.setdefault(field, []):
            found[field].append(message)

    for detail in error.errors():
        if detail["type"] == "workload":
            for field, messages in detail["ctx"]["problems"].items():
                for message in messages:
                    add(field, message)
            continue
        loc = detail["loc"]
        if detail["type"] == "extra_forbidden":
            add(shown(loc[0]), f"Unknown field {shown(loc[0])}.")
            continue
        add(str(loc[0]), _message(str(loc[0]), detail))
    return found


def check(fields: Mapping[str, Any]) -> tuple[Submission | None, dict[str, list[str]]]:
    """The submission, or None and every problem with it.  The workload rule (command or
    duration_seconds) is the model's own, but pydantic checks a model's rules only once
    every field is valid: it is said here too, so a form shows all of its problems at
    once."""
    try:
        return Submission.model_validate(fields), {}
    except ValidationError as error:
        found = problems(error)
    for field, messages in workload_problems(fields).items():
        for message in messages:
            if message not in found.setdefault(field, []):
                found[field].append(message)
    return None, found


# A batch's submissions, checked in one call (services/batch.py).
_ALL: TypeAdapter[list[Submission]] = TypeAdapter(list[Submission])


def check_all(items: Sequence[object]) -> list[Submission] | None:
    """Every submission of a batch in one call: the Submissions when all of them are
    valid (a Submission given is taken as it is), else None, and then `check` each one
    says what is wrong in its own words.  Only the all-valid answer is fast: it is the
    common one, and the refusals stay exactly `check`'s."""
    try:
        return _ALL.validate_python(items if isinstance(items, list) else list(items))
    except ValidationError:
        return None


def dump_all(submissions: list[Submission]) -> list[dict[str, Any]]:
    """Each submission's fields (defaults filled in), as `model_dump` gives them."""
    return _ALL.dump_python(submissions)


@cache
def _field_adapter(field: str) -> TypeAdapter[Any]:
    info = Submission.model_fields[field]
    annotation: Any = Annotated[(info.annotation, *info.metadata)]  # type: ignore[valid-type]
    return TypeAdapter(annotation, config=ConfigDict(strict=True))


def check_field(field: str, value: object) -> tuple[Any, dict[str, list[str]]]:
    """One field alone (a change of a job's priority or keep-alive, a client_token), by
    the Submission's own rule for it: (the value, {}) or (None, its problems)."""
    try:
        return _field_adapter(field).validate_python(value), {}
    except ValidationError as error:
        return None, {field: [_message(field, detail) for detail in error.errors()]}
