"""Many rows of one table updated in one statement, each guarded by a compare-and-set.

    WITH v(id, c0, c1, m0) AS (VALUES (%s, %s, %s, %s), ...)
    UPDATE t SET a = v.c0, b = v.c1, c = %s FROM v
    WHERE t.id = v.id AND t.status = v.m0 AND t.outcome IS NULL RETURNING t.id

The ids returned are the rows that matched: a row whose old state changed meanwhile (a job
terminated since the snapshot, an attempt someone else ended) is left as it is, and the
caller sees that it lost the race and acts as the row-by-row code did (a cycle rolls back
with StaleSnapshot, an attempt's end is skipped).  PostgreSQL and SQLite (3.35 or later:
UPDATE ... FROM and RETURNING) run the same SQL; PostgreSQL gets a cast per value, so that
the VALUES columns have the fields' types.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import connection
from django.db.models import Field, Model

# PostgreSQL takes at most 65,535 parameters a statement; Django's SQLite backend says 999.
POSTGRES_MAX_PARAMS = 30_000


def update_rows(
    model: type[Model],
    rows: Iterable[tuple[int, Sequence[object]]],
    fields: Sequence[str],
    *,
    expect: Sequence[str] = (),
    values: Mapping[str, object] | None = None,
    where: Mapping[str, object] | None = None,
) -> set[int]:
    """Update each row `(pk, per_row)` in as few statements as the database allows (one
    for up to thousands of rows).

    `per_row` holds one value for each of `fields`, then the expected old value of each
    of `expect` (the row is updated only if its column still equals it); `values` are set
    on every row; `where` are conditions every row must still meet: `field`,
    `field__in` (a sequence) or `field__isnull` (a bool).  Returns the pks updated.  A pk
    may appear once."""
    rows = list(rows)
    if not rows:
        return set()
    if len({key for key, _ in rows}) != len(rows):  # a join would update such a row once
        raise ValueError("update_rows: a row is named twice")
    meta = model._meta
    table = connection.ops.quote_name(meta.db_table)
    pk = meta.pk
    assert pk is not None
    row_fields = [meta.get_field(name) for name in (*fields, *expect)]
    postgres = connection.vendor == "postgresql"

    def slot(field: Field[Any, Any]) -> str:
        return f"%s::{field.db_type(connection)}" if postgres else "%s"

    def column(field: Field[Any, Any]) -> str:
        return f"{table}.{connection.ops.quote_name(field.column)}"

    row_sql = "(" + ", ".join([slot(pk), *(slot(f) for f in row_fields)]) + ")"
    names = ["id", *(f"c{i}" for i in range(len(fields))),
             *(f"m{i}" for i in range(len(expect)))]
    sets = [f"{connection.ops.quote_name(f.column)} = v.c{i}"
            for i, f in enumerate(row_fields[:len(fields)])]
    set_params: list[object] = []
    for name, value in (values or {}).items():
        field = meta.get_field(name)
        sets.append(f"{connection.ops.quote_name(field.column)} = {slot(field)}")
        set_params.append(field.get_db_prep_save(value, connection))
    conditions = [f"{column(pk)} = v.id"]
    conditions += [f"{column(f)} = v.m{i}" for i, f in enumerate(row_fields[len(fields):])]
    where_params: list[object] = []
    for lookup, value in (where or {}).items():
        name, _, operator = lookup.partition("__")
        field = meta.get_field(name)
        if operator == "isnull":
            conditions.append(f"{column(field)} IS {'' if value else 'NOT '}NULL")
        elif operator == "in":
            choices = list(value)  # type: ignore[call-overload]
            conditions.append(f"{column(field)} IN ({', '.join(['%s'] * len(choices))})")
            where_params += [field.get_db_prep_value(c, connection) for c in choices]
        elif operator == "":
            conditions.append(f"{column(field)} = %s")
            where_params.append(field.get_db_prep_value(value, connection))
        else:
            raise ValueError(f"update_rows: unsupported lookup {lookup!r}")
    per_row = 1 + len(row_fields)
    budget = (POSTGRES_MAX_PARAMS if postgres else connection.features.max_query_params or 999)
    chunk = max(1, (budget - len(set_params) - len(where_params)) // per_row)
    updated: set[int] = set()
    for start in range(0, len(rows), chunk):
        part = rows[start:start + chunk]
        params: list[object] = []
        for key, items in part:
            if len(items) != len(row_fields):
                raise ValueError(f"update_rows: row {key} has {len(items)} values, "
                                 f"{len(row_fields)} expected")
            params.append(pk.get_db_prep_value(key, connection))
            params += [f.get_db_prep_save(item, connection)
                       for f, item in zip(row_fields, items, strict=True)]
        sql = (f"WITH v({', '.join(names)}) AS (VALUES {', '.join([row_sql] * len(part))}) "
               f"UPDATE {table} SET {', '.join(sets)} FROM v "
               f"WHERE {' AND '.join(conditions)} RETURNING {column(pk)}")
        with connection.cursor() as cursor:
            cursor.execute(sql, [*params, *set_params, *where_params])
            updated.update(row[0] for row in cursor.fetchall())
    return updated


__all__ = ["update_rows"]
