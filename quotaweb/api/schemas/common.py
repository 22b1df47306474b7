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
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Le, MaxLen, MinLen
from ninja import Schema
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
    create_model,
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

def literal_of_values(values: tuple[str, ...]) -> Any:
    """`Literal[...]` of some of an engine enum's values (see literal_of)."""
    return Literal[values]


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


# A request body derived from a services model --------------------------------------------


def _plain(annotation: Any) -> Any:
    """The type alone, without the constraints and validators annotated on it (inside
    lists, dicts and optionals too)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _plain(get_args(annotation)[0])
    if origin in (Union, UnionType):
        return Union[tuple(_plain(arg) for arg in get_args(annotation))]  # noqa: UP007
    if origin in (list, dict):
        return origin[tuple(_plain(arg) for arg in get_args(annotation))]
    return annotation


def _rules(metadata: list[Any], is_list: bool) -> dict[str, Any]:
    """A field's constraints as JSON Schema keywords."""
    rules: dict[str, Any] = {}
    for rule in metadata:
        if isinstance(rule, Ge):
            rules["minimum"] = rule.ge
        elif isinstance(rule, Le):
            rules["maximum"] = rule.le
        elif isinstance(rule, MinLen):
            rules["minItems" if is_list else "minLength"] = rule.min_length
        elif isinstance(rule, MaxLen):
            rules["maxItems" if is_list else "maxLength"] = rule.max_length
        elif getattr(rule, "pattern", None):
            rules["pattern"] = rule.pattern
    return rules


def field_rules(model: type[BaseModel], field: str) -> dict[str, Any]:
    """The JSON Schema keywords of one field's constraints in `model`."""
    info = model.model_fields[field]
    return _rules(info.metadata, get_origin(_plain(info.annotation)) is list)


def documented_body(model: type[BaseModel], name: str, doc: str,
                    types: dict[str, Any] | None = None,
                    documents: dict[str, dict[str, Any]] | None = None) -> type[RequestBody]:
    """A request body with `model`'s fields, types, defaults and descriptions, whose value
    rules are documented, not enforced: the services enforce them with `model` itself,
    after the permission check, so a body is refused with the same words wherever it
    comes from.  `types` replaces a field's type (a reference the body checks itself);
    `documents` adds to what a field's schema says."""
    fields: dict[str, Any] = {}
    for field_name, info in model.model_fields.items():
        annotation = (types or {}).get(field_name, _plain(info.annotation))
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        schema = {**field_rules(model, field_name), **extra,
                  **(documents or {}).get(field_name, {})}
        default: Any = {"default_factory": info.default_factory} if info.default_factory \
            else {} if info.is_required() else {"default": info.default}
        fields[field_name] = (annotation, Field(**default, description=info.description,
                                                json_schema_extra=schema or None))
    body: type[RequestBody] = create_model(name, __base__=RequestBody, __doc__=doc, **fields)
    return body
