"""Checking a job submission (docs/semantics.md 4, docs/api.md POST /jobs) in two steps:
its own fields by the Submission model (submission_schema.py, the one source of fields,
defaults and constraints), then what depends on its quota share; and the fingerprint
that recognises a repeated request."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ..models import QuotaShare
from . import values
from .errors import Problems, ValidationFailed
from .submission_schema import (
    DEFAULTS,
    FIELDS,
    MAX_PRIORITY,
    MAX_RETRY_ATTEMPTS,
    check,
    check_field,
)

# Every field a submission may carry (docs/api.md POST /jobs), with its default.
SUBMISSION_DEFAULTS: dict[str, Any] = DEFAULTS
SUBMISSION_FIELDS = FIELDS

__all__ = ["MAX_PRIORITY", "MAX_RETRY_ATTEMPTS", "SUBMISSION_DEFAULTS", "SUBMISSION_FIELDS",
           "keep_alive_within_cap", "request_fingerprint", "validate_submission"]


def request_fingerprint(fields: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a submission (defaults filled in, client_token
    left out), so that a repeat with the same meaning is recognised as the same request."""
    body = {**SUBMISSION_DEFAULTS, **fields}
    body.pop("client_token", None)
    if isinstance(body.get("quota_share"), QuotaShare):
        body["quota_share"] = body["quota_share"].name
    if body.get("command") == "":
        body["command"] = None
    if body.get("min_runtime_seconds") is None:  # as before the field existed
        body.pop("min_runtime_seconds", None)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def validate_submission(fields: Mapping[str, Any], share: QuotaShare) -> dict[str, Any]:
    """docs/semantics.md 4's submission rules; returns the Job field values (defaults filled in).
    Raises ValidationFailed naming every field with a problem."""
    # The share was found (and permission checked) from quota_share already.
    submission, found = check({**fields, "quota_share": share.name})
    problems = Problems()
    problems.merge(found)
    if "instance_type" not in found and "instance_type" in fields:
        _instance_type(problems, fields["instance_type"], share)
    if "keep_alive_seconds" not in found:
        keep_alive_within_cap(problems, fields.get("keep_alive_seconds", 0), share)
    if "min_runtime_seconds" not in found and fields.get("min_runtime_seconds") is not None:
        _min_runtime_within_share(problems, fields["min_runtime_seconds"], share)
    if problems or submission is None:
        raise ValidationFailed(problems.fields)
    cleaned = submission.model_dump(exclude={"quota_share"})
    cleaned["command"] = cleaned["command"] or ""  # the column's "no command"
    return cleaned


def _min_runtime_within_share(problems: Problems, value: int, share: QuotaShare) -> None:
    """A job's min_runtime_seconds is at most its share's (docs/semantics.md 5.8)."""
    if value > share.min_runtime_seconds:
        problems.add("min_runtime_seconds",
                     f"min_runtime_seconds {value} is above quota share {share.name}'s "
                     f"minimum runtime of {share.min_runtime_seconds}.")


def _instance_type(problems: Problems, value: object, share: QuotaShare) -> None:
    known = getattr(share, "known_unit", None)  # (unit, has a limit?) found with the share
    if known is not None and known[0] == value and known[1]:
        return
    # .all(): served from the prefetch cache when the caller loaded the limits (a batch).
    units = sorted(limit.capacity_unit for limit in share.capacity_limits.all())
    if value not in units:
        problems.add("instance_type", f"Quota share {share.name} has no capacity limit for "
                                      f"{values.shown(value)}; use one of {', '.join(units)}.")


def keep_alive_within_cap(problems: Problems, value: object, share: QuotaShare) -> int | None:
    """keep_alive_seconds is 0..the share's max_keep_alive_seconds (docs/semantics.md 2)."""
    checked, found = check_field("keep_alive_seconds", value)
    problems.merge(found)
    if checked is not None and checked > share.max_keep_alive_seconds:
        problems.add("keep_alive_seconds", f"keep_alive_seconds {checked} is above quota share "
                                           f"{share.name}'s cap of "
                                           f"{share.max_keep_alive_seconds}.")
        return None
    return checked
