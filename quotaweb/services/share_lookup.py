"""The share a request names, with the caller's membership and whether the share has a
limit for the job's unit, in one statement.

Every submission starts here, so it is on the hottest path the API has.  Built with the
ORM (a filter and two Exists annotations) the query cost about 2 ms of CPU to compile and
turn into an object, more than the rest of the submission's own Python; the SQL below is
built once per process from the models' metadata, the backend's converters are applied to
the row as the ORM applies them (SQLite's datetimes become aware), and the row becomes a
QuotaShare through `from_db`, as the ORM would make it.  On PostgreSQL it is a prepared
statement (quotaweb/postgresql/prepared.py): planning it cost five times its work.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from django.db import connection
from django.db.models.expressions import Col

from ..models import CapacityLimit, QuotaShare
from ..postgresql import prepared

_FIELDS = tuple(QuotaShare._meta.concrete_fields)
_ATTNAMES = [field.attname for field in _FIELDS]


def find_share(name: str, user_id: int | None, unit: str | None) -> QuotaShare | None:
    """The live share called `name`, or None.  With `user_id` it carries `known_member`
    (user id, member?) and with `unit` `known_unit` (unit, has a limit?), which
    permissions.is_member and the submission's checks read instead of asking again."""
    params: list[object] = []
    if user_id is not None:
        params.append(user_id)
    if unit is not None:
        params.append(unit)
    params.append(name)
    sql = _sql(user_id is not None, unit is not None)
    if connection.vendor == "postgresql":
        row = prepared.fetchone(sql, params)  # its plan made once per connection
    else:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
    if row is None:
        return None
    values = list(row[:len(_FIELDS)])
    for index, column, converters in _converters(connection.vendor):
        for convert in converters:
            values[index] = convert(values[index], column, connection)
    share = QuotaShare.from_db(connection.alias, _ATTNAMES, values)
    flags = iter(row[len(_FIELDS):])
    if user_id is not None:
        share.known_member = (user_id, bool(next(flags)))
    if unit is not None:
        share.known_unit = (unit, bool(next(flags)))
    return share


@cache
def _converters(vendor: str) -> list[tuple[int, Col, list[Callable[..., Any]]]]:
    """(position, column, converters) of each field whose value the backend converts."""
    found = []
    for index, field in enumerate(_FIELDS):
        column = field.get_col(QuotaShare._meta.db_table)
        converters = (connection.ops.get_db_converters(column)
                      + field.get_db_converters(connection))
        if converters:
            found.append((index, column, converters))
    return found


@cache
def _sql(with_member: bool, with_unit: bool) -> str:
    quote = connection.ops.quote_name
    members = QuotaShare._meta.get_field("members")
    through = QuotaShare.members.through._meta.db_table
    limits = CapacityLimit._meta
    columns = [f"s.{quote(field.column)}" for field in _FIELDS]
    if with_member:
        columns.append(
            f"EXISTS (SELECT 1 FROM {quote(through)} m "
            f"WHERE m.{quote(members.m2m_column_name())} = s.{quote('id')} "
            f"AND m.{quote(members.m2m_reverse_name())} = %s)")
    if with_unit:
        columns.append(
            f"EXISTS (SELECT 1 FROM {quote(limits.db_table)} l "
            f"WHERE l.{quote(limits.get_field('quota_share').column)} = s.{quote('id')} "
            f"AND l.{quote(limits.get_field('capacity_unit').column)} = %s)")
    # The name is unique among live shares (unique_live_share_name): one row at most.
    return (f"SELECT {', '.join(columns)} FROM {quote(QuotaShare._meta.db_table)} s "
            f"WHERE s.{quote('name')} = %s AND s.{quote('deleted_at')} IS NULL")
