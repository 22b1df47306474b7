"""quotaweb_whole_submission(expected, inserted, admitted): the check that ends a
submission's write statement on PostgreSQL (services/admission.py, write_at_once).

It raises when the statement inserted fewer jobs than it was given (a client_token was
taken meanwhile: SQLSTATE QW409) or wrote fewer SUBMITTED events (a share refused them:
QW403).  The error aborts the transaction, so the COMMIT sent behind the statement in the
same round trip commits nothing, and no round trip is left inside the admission lock.
SQLite has no functions of this kind and takes the other path (admission.admit)."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION quotaweb_whole_submission(
    expected integer, inserted integer, admitted integer) RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
    IF inserted < expected THEN
        RAISE EXCEPTION 'a client_token of the submission was taken meanwhile'
            USING ERRCODE = 'QW409';
    END IF;
    IF admitted < expected THEN
        RAISE EXCEPTION 'the share refused the submission' USING ERRCODE = 'QW403';
    END IF;
    RETURN admitted;
END
$$
"""
DROP = "DROP FUNCTION IF EXISTS quotaweb_whole_submission(integer, integer, integer)"


def create(apps, schema_editor):  # noqa: ANN001, ARG001 - a migration's signature
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):  # noqa: ANN001, ARG001
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):

    dependencies = [
        ('quotaweb', '0013_job_with_estimate'),
    ]

    operations = [
        migrations.RunPython(create, drop),
    ]
