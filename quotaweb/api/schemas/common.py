"""Building blocks shared by the API's schemas.

Request bodies are strict (a bool is not an integer, "5" is not a number) and forbid
unknown fields.  Their *value* rules (ranges, patterns, caps) are checked by the services,
the one place that knows them; the schemas only document them (`documented`), so the
OpenAPI description and the services' refusals cannot disagree about which code a
client gets back.  References that reach a query (a share's name, a username) are checked
here for well-formedness, so nothing a client sends can reach the database malformed.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import Enum
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)
from pydantic_core import PydanticCustomError

from ...read_model.times import iso
from ...services import values

# ISO 8601 in UTC with a Z, as the websocket writes times.
UtcTime = Annotated[
    datetime,
    PlainSerializer(iso, return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")


def _iso_only(value: Any) -> Any:
    """A time in a query is an ISO 8601 string; pydantic would also read a bare number as
    epoch seconds, which the schema does not promise."""
    if isinstance(value, str) and not ISO_DATE.match(value):
        raise ValueError("must be an ISO 8601 time, e.g. 2025-01-31T12:00:00Z")
    return value


# A time given in a query string.
IsoTime = Annotated[datetime, BeforeValidator(_iso_only)]

def literal_of(enum: type[Enum]) -> Any:
    """`Literal[...]` of an enum's values: an engine enum is the one source of a status's
    spellings, and the OpenAPI schema still lists them inline, as docs/api.md shows them."""
    return Literal[tuple(member.value for member in enum)]


SHARE_NAME = values.NAME.pattern
UNIT_NAME = values.UNIT.pattern
ShareName = Annotated[str, StringConstraints(pattern=SHARE_NAME)]
UnitName = Annotated[str, StringConstraints(pattern=UNIT_NAME)]
# A username as Django stores it: what a query may compare (no NUL, at most 150).
Username = Annotated[str, StringConstraints(min_length=1, max_length=150,
                                            pattern=r"^[^\x00]+$")]
MAX_ID = 2**63 - 1


def documented(**schema: Any) -> Any:
    """Describe a value rule in the OpenAPI schema that the services enforce."""
    return Field(json_schema_extra=schema)


STRICT_BODY = ConfigDict(extra="forbid", strict=True)


class RequestBody(Schema):
    """The base of every request body: strict, no unknown fields, and no text that the
    database cannot store.  JSON may spell a lone surrogate (`"\\ud800"`) or a NUL
    (`"\\u0000"`) anywhere; this one check, on every field before its own validation,
    refuses them (422) wherever they are, in strings, lists and objects, keys included."""

    model_config = STRICT_BODY

    @field_validator("*", mode="before")
    @classmethod
    def _storable_text(cls, value: Any, info: ValidationInfo) -> Any:
        where = values.first_bad_text(value)
        if where is not None:
            inside = where if where.startswith("[") or not where else f".{where}"
            raise PydanticCustomError(
                "bad_text", "{field} {rule}.",
                {"field": f"{info.field_name}{inside}", "rule": values.BAD_CHARACTERS_RULE})
        return value
