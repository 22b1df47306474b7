"""The Submission model (quotaweb/services/submission_schema.py) is the one source of a job
submission's fields, defaults and constraints: the API's body, the submit form and the
services all take them from it, and its refusals read as the services' always did."""

from __future__ import annotations

from typing import Any

import pytest

from quotaweb.api.schemas.jobs import JobIn, JobPatch
from quotaweb.services import jobs
from quotaweb.services.errors import Forbidden, ValidationFailed
from quotaweb.services.submission_schema import (
    DEFAULTS,
    FIELDS,
    MAX_PRIORITY,
    Submission,
    bounds,
    check,
    check_field,
)
from quotaweb.services.values import MAX_INT
from quotaweb.web.forms import SubmitForm

from .conftest import UNIT

GOOD = {"name": "train", "quota_share": "QS1", "instance_type": UNIT, "duration_seconds": 60}


def problems_of(**overrides: Any) -> dict[str, list[str]]:
    submission, found = check({**GOOD, **overrides})
    assert (submission is None) == bool(found)
    return found


@pytest.mark.parametrize(("overrides", "expected"), [
    ({"priority": 10_000}, {"priority": ["priority must be between 0 and 9999, not 10000."]}),
    ({"priority": True}, {"priority": ["priority must be an integer."]}),
    ({"priority": "5"}, {"priority": ["priority must be an integer."]}),
    # Above the database's largest integer: "at most", never "at least" (issue 13).
    ({"instance_count": 3_000_000_000},
     {"instance_count": ["instance_count must be at most 2147483647, not 3000000000."]}),
    ({"instance_count": 0}, {"instance_count": ["instance_count must be at least 1, not 0."]}),
    ({"max_runtime_seconds": int("9" * 60)}, {"max_runtime_seconds": [
        "max_runtime_seconds must be at most 2147483647, not 999999999999… (60 digits)."]}),
    ({"name": "has space"},
     {"name": ["name must be 1-128 of A-Z a-z 0-9 _ - (got 'has space')."]}),
    ({"role": "r" * 257}, {"role": ["role must be 0-256 characters long."]}),
    ({"client_token": ""}, {"client_token": ["client_token must be 1-64 characters long."]}),
    ({"role": "r\x00"},
     {"role": ["role must not contain NUL or unpaired surrogate characters."]}),
    ({"subnets": ["s" * 257]}, {"subnets": [
        "subnets must be a list of at most 64 strings of at most 256 characters."]}),
    ({"environment": {"A=B": "1"}}, {"environment": [
        "environment must map names (non-empty, no '=') to strings without NUL or unpaired "
        "surrogates; 'A=B' does not."]}),
    ({"enable_network_isolation": 1},
     {"enable_network_isolation": ["enable_network_isolation must be true or false."]}),
    ({"gpu": "yes"}, {"gpu": ["Unknown field gpu."]}),
    ({"command": "   ", "duration_seconds": None}, {"command": ["command must not be blank."]}),
])
def test_each_refusal_names_its_field_in_the_services_words(
        overrides: dict[str, Any], expected: dict[str, list[str]]) -> None:
    assert problems_of(**overrides) == expected


def test_the_workload_rule_is_said_with_the_other_problems() -> None:
    # pydantic checks a model's own rules only on valid fields: `check` says it anyway.
    found = problems_of(duration_seconds=None, priority=-1)
    message = "Give command (local executor) or duration_seconds (simulated executor)."
    assert found == {"priority": ["priority must be between 0 and 9999, not -1."],
                     "command": [message], "duration_seconds": [message]}
    both = "Give either command or duration_seconds, not both."
    assert problems_of(command="echo") == {"command": [both], "duration_seconds": [both]}


def test_defaults_are_the_models_and_a_minimal_submission_gets_them() -> None:
    submission, found = check(GOOD)
    assert not found and submission is not None
    given = submission.model_dump()
    assert {field: given[field] for field in DEFAULTS if field != "duration_seconds"} == {
        field: value for field, value in DEFAULTS.items() if field != "duration_seconds"}
    assert DEFAULTS["max_runtime_seconds"] == 86_400 and DEFAULTS["retry_attempts"] == 1
    assert frozenset(Submission.model_fields) == FIELDS


def test_the_api_body_documents_the_models_rules_without_enforcing_them() -> None:
    """JobIn has the model's fields, defaults and ranges in its schema; it enforces only
    types, so the services check permission before any value rule."""
    schema = JobIn.model_json_schema()
    assert set(schema["properties"]) == set(Submission.model_fields)
    assert set(schema["required"]) == {"name", "quota_share", "instance_type"}
    for field in ("priority", "instance_count", "retry_attempts", "max_runtime_seconds",
                  "volume_size_gb", "duration_seconds"):
        low, high = bounds(field)
        assert (schema["properties"][field]["minimum"],
                schema["properties"][field]["maximum"]) == (low, high), field
    assert schema["properties"]["priority"]["default"] == DEFAULTS["priority"]
    assert JobPatch.model_json_schema()["properties"]["priority"]["maximum"] == MAX_PRIORITY
    body = JobIn.model_validate({**GOOD, "priority": MAX_PRIORITY + 1})
    assert body.priority == MAX_PRIORITY + 1  # refused later, by the services
    with pytest.raises(ValueError, match="priority"):
        JobIn.model_validate({**GOOD, "priority": "high"})  # a type is the body's own


def test_the_submit_form_starts_from_the_models_defaults() -> None:
    form = SubmitForm(shares=[])
    for field in ("priority", "instance_count", "keep_alive_seconds", "retry_attempts",
                  "max_runtime_seconds", "volume_size_gb"):
        assert form.fields[field].initial == DEFAULTS[field], field
    assert form.fields["priority"].help_text.startswith(f"0-{MAX_PRIORITY};")


def test_a_single_field_is_checked_by_the_same_rule() -> None:
    assert check_field("priority", 7) == (7, {})
    assert check_field("priority", MAX_PRIORITY + 1)[1] == {
        "priority": [f"priority must be between 0 and {MAX_PRIORITY}, not {MAX_PRIORITY + 1}."]}
    assert check_field("keep_alive_seconds", MAX_INT + 1)[1] == {"keep_alive_seconds": [
        f"keep_alive_seconds must be at most {MAX_INT}, not {MAX_INT + 1}."]}


@pytest.mark.django_db
def test_permission_is_checked_before_the_values(walkthrough_config: Any, other: Any,
                                                 member: Any) -> None:
    with pytest.raises(Forbidden):
        jobs.submit_job(other, **{**GOOD, "priority": MAX_PRIORITY + 1})
    with pytest.raises(ValidationFailed) as refused:
        jobs.submit_job(member, **{**GOOD, "priority": MAX_PRIORITY + 1,
                                   "keep_alive_seconds": 99_999})
    assert set(refused.value.fields) == {"priority", "keep_alive_seconds"}
    assert "above quota share QS1's cap" in refused.value.fields["keep_alive_seconds"][0]
