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
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
    WithJsonSchema,
)

from ...realtime.serializers import iso
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
