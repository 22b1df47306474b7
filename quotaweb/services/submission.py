"""What a job submission may carry and how it is checked (docs/semantics.md 4,
docs/api.md POST /jobs), and the fingerprint that recognises a repeated request."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ..models import QuotaShare
from . import values
from .errors import Problems, ValidationFailed

MAX_PRIORITY = 9999
MAX_RETRY_ATTEMPTS = 10

# Every field a submission may carry (docs/api.md POST /jobs), with its default.
SUBMISSION_DEFAULTS: dict[str, Any] = {
    "priority": 0,
    "instance_count": 1,
    "keep_alive_seconds": 0,
    "role": "",
    "volume_size_gb": 0,
    "volume_kms_key_id": "",
    "security_group_ids": [],
    "subnets": [],
    "enable_network_isolation": False,
    "enable_inter_container_traffic_encryption": False,
    "retry_attempts": 1,
    "preemption_retries_before_termination": None,
    "max_runtime_seconds": 86_400,
    "environment": {},
    "command": None,
    "duration_seconds": None,
    "client_token": None,
}
SUBMISSION_FIELDS = frozenset({"name", "quota_share", "instance_type", *SUBMISSION_DEFAULTS})


def request_fingerprint(fields: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a submission (defaults filled in, client_token
    left out), so that a repeat with the same meaning is recognised as the same request."""
    body = {**SUBMISSION_DEFAULTS, **fields}
    body.pop("client_token", None)
    if isinstance(body.get("quota_share"), QuotaShare):
        body["quota_share"] = body["quota_share"].name
    if body.get("command") == "":
        body["command"] = None
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def validate_submission(fields: Mapping[str, Any], share: QuotaShare) -> dict[str, Any]:
    """docs/semantics.md 4's submission rules; returns the Job field values (defaults filled in).
    Raises ValidationFailed naming every field with a problem."""
    problems = Problems()
    values.unknown_fields(problems, fields, SUBMISSION_FIELDS)
    given = {**SUBMISSION_DEFAULTS, **fields}
    given.pop("quota_share", None)
    cleaned: dict[str, Any] = {}
    for field in ("name", "instance_type"):
        if field not in given:
            problems.add(field, f"{field} is required.")
    if "name" in given:
        cleaned["name"] = values.pattern(problems, "name", given["name"], values.NAME,
                                         values.NAME_RULE)
    if "instance_type" in given:
        cleaned["instance_type"] = _instance_type(problems, given["instance_type"], share)
    cleaned.update(_numbers(problems, given, share))
    cleaned.update(_match_attributes(problems, given))
    cleaned.update(_workload(problems, given))
    cleaned["client_token"] = given["client_token"]
    if problems:
        raise ValidationFailed(problems.fields)
    return cleaned


def _instance_type(problems: Problems, value: object, share: QuotaShare) -> str | None:
    # .all(): served from the prefetch cache when the caller loaded the limits (a batch).
    units = sorted(limit.capacity_unit for limit in share.capacity_limits.all())
    if not isinstance(value, str) or value not in units:
        got = values.shown(value) if isinstance(value, str) else type(value).__name__
        problems.add("instance_type", f"Quota share {share.name} has no capacity limit for "
                                      f"{got}; use one of {', '.join(units)}.")
        return None
    return value


def _numbers(problems: Problems, given: Mapping[str, Any], share: QuotaShare) -> dict[str, Any]:
    cleaned = {
        "priority": values.integer(problems, "priority", given["priority"], 0, MAX_PRIORITY),
        "instance_count": values.integer(problems, "instance_count", given["instance_count"], 1),
        "retry_attempts": values.integer(problems, "retry_attempts", given["retry_attempts"],
                                         1, MAX_RETRY_ATTEMPTS),
        "max_runtime_seconds": values.integer(problems, "max_runtime_seconds",
                                              given["max_runtime_seconds"], 1),
        "preemption_retries_before_termination": None,
        "keep_alive_seconds": keep_alive_within_cap(
            problems, given["keep_alive_seconds"], share),
    }
    retries = given["preemption_retries_before_termination"]
    if retries is not None:
        cleaned["preemption_retries_before_termination"] = values.integer(
            problems, "preemption_retries_before_termination", retries, 0)
    return cleaned


def keep_alive_within_cap(problems: Problems, value: object, share: QuotaShare) -> int | None:
    """keep_alive_seconds is 0..the share's max_keep_alive_seconds (docs/semantics.md 2)."""
    checked = values.integer(problems, "keep_alive_seconds", value, 0)
    if checked is not None and checked > share.max_keep_alive_seconds:
        problems.add("keep_alive_seconds", f"keep_alive_seconds {checked} is above quota share "
                                           f"{share.name}'s cap of "
                                           f"{share.max_keep_alive_seconds}.")
        return None
    return checked


def _match_attributes(problems: Problems, given: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "role": values.text(problems, "role", given["role"], max_length=256),
        "volume_size_gb": values.integer(problems, "volume_size_gb", given["volume_size_gb"], 0),
        "volume_kms_key_id": values.text(problems, "volume_kms_key_id",
                                         given["volume_kms_key_id"], max_length=256),
        "security_group_ids": values.string_list(problems, "security_group_ids",
                                                 given["security_group_ids"]),
        "subnets": values.string_list(problems, "subnets", given["subnets"]),
        "enable_network_isolation": values.boolean(
            problems, "enable_network_isolation", given["enable_network_isolation"]),
        "enable_inter_container_traffic_encryption": values.boolean(
            problems, "enable_inter_container_traffic_encryption",
            given["enable_inter_container_traffic_encryption"]),
    }


def _workload(problems: Problems, given: Mapping[str, Any]) -> dict[str, Any]:
    """Exactly one of command (local executor) and duration_seconds (simulated)."""
    command, duration = given["command"], given["duration_seconds"]
    has_command = command is not None and command != ""
    if has_command == (duration is not None):
        message = ("Give either command or duration_seconds, not both." if has_command else
                   "Give command (local executor) or duration_seconds (simulated executor).")
        problems.add("command", message)
        problems.add("duration_seconds", message)
    cleaned: dict[str, Any] = {
        "command": "",
        "duration_seconds": None,
        "environment": values.environment(problems, "environment", given["environment"]),
    }
    if has_command:
        checked = values.text(problems, "command", command, max_length=100_000)
        if checked is not None and not checked.strip():
            problems.add("command", "command must not be blank.")
        cleaned["command"] = checked or ""
    if duration is not None:
        cleaned["duration_seconds"] = values.integer(problems, "duration_seconds", duration, 0)
    return cleaned
