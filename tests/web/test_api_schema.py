"""The served OpenAPI schema describes the whole API, and the API keeps to it: a
schemathesis run (property-based requests generated from the schema, as an administrator)
gets no 5xx and only responses that conform to the schema, and leaves the database's
invariants intact."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.db.models import Sum
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi import checks as openapi_checks

from quotaweb.models import ApiToken, CapacityLimit, CapacityUnit, Job, QuotaShare

from . import test_api_helpers as helpers
from .test_api_helpers import World, job

world = helpers.world  # a fixture

pytestmark = pytest.mark.django_db

SCHEMA_URL = "/api/v1/openapi.json"
# ~ a few hundred requests in all: 20 operations × at most this many examples each.
EXAMPLES_PER_OPERATION = 10

CHECKS = [
    schemathesis.checks.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_schema_conformance,
    openapi_checks.negative_data_rejection,
]


# The schema as the application serves it (no database needed to serve it).
schema = schemathesis.openapi.from_wsgi(SCHEMA_URL, get_wsgi_application())
# A body over the server's 1 MiB cap is refused with 413 before it is read (docs/api.md,
# errors): a rejection like the others, which schemathesis does not expect by default.
# Since `command` documents its 100,000-character limit, a batch of such invalid jobs can
# be that large.
_rejection = schema.config.checks.negative_data_rejection
_rejection.expected_statuses = [*_rejection.expected_statuses, "413"]


@pytest.fixture
def admin_token(world: World) -> Iterator[str]:
    """An administrator's bearer token over a small world with two jobs.  While the test
    runs, requests keep the test's database connection open (as django.test.Client
    does), so they see the test's transaction."""
    job("QS1", status="RUNNABLE")
    job("QS2", status="RUNNING")
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield ApiToken.issue(world.users["admin"])[1]
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@schema.parametrize()
@settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case: Any, admin_token: str) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {admin_token}"}, checks=CHECKS)
    assert_invariants()


# What docs/api.md promises, operation by operation.
OPERATIONS = {
    ("get", "/api/v1/capacity"), ("put", "/api/v1/capacity"),
    ("get", "/api/v1/quota-shares"), ("post", "/api/v1/quota-shares"),
    ("get", "/api/v1/quota-shares/{name}"), ("patch", "/api/v1/quota-shares/{name}"),
    ("delete", "/api/v1/quota-shares/{name}"),
    ("get", "/api/v1/jobs"), ("post", "/api/v1/jobs"), ("get", "/api/v1/jobs/{job_id}"),
    ("post", "/api/v1/jobs/batch"),
    ("patch", "/api/v1/jobs/{job_id}"), ("post", "/api/v1/jobs/{job_id}/terminate"),
    ("get", "/api/v1/jobs/{job_id}/logs"), ("get", "/api/v1/warm-pools"),
    ("get", "/api/v1/usage"), ("get", "/api/v1/events"),
    ("get", "/api/v1/tokens"), ("post", "/api/v1/tokens"),
    ("delete", "/api/v1/tokens/{token_id}"), ("post", "/api/v1/tokens/revoke-all"),
    ("get", "/api/v1/reports/usage"), ("post", "/api/v1/what-if"),
}
JOB_FIELDS = {
    "id", "name", "quota_share", "priority", "status", "status_reason", "pending_reason",
    "position", "instance_type", "instance_count", "created_at", "scheduled_at", "started_at",
    "stopped_at", "attempts", "preemption_summary", "warm_pool", "keep_alive_seconds", "role",
    "volume_size_gb", "volume_kms_key_id", "security_group_ids", "subnets",
    "enable_network_isolation", "enable_inter_container_traffic_encryption", "retry_attempts",
    "preemption_retries_before_termination", "max_runtime_seconds", "environment", "command",
    "duration_seconds",
}


@pytest.fixture
def served(client: Any) -> dict[str, Any]:
    response = client.get(SCHEMA_URL)  # no credentials: the schema is public
    assert response.status_code == 200 and response["Content-Type"].startswith(
        "application/json")
    return response.json()


def test_the_schema_describes_every_operation_of_api_md(served: dict[str, Any]) -> None:
    assert served["openapi"].startswith("3.")
    found = {(method, path) for path, operations in served["paths"].items()
             for method in operations}
    assert found == OPERATIONS


def ref(schema: dict[str, Any]) -> str:
    return schema["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]


def test_every_operation_documents_its_answer_and_its_errors(served: dict[str, Any]) -> None:
    for path, operations in served["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            errors = {"400", "401", "403", "404", "409", "413", "422"} if method != "get" else {
                "401", "404", "422"}
            assert errors <= set(responses), (method, path)
            assert all(ref(responses[code]) == "ErrorOut" for code in errors), (method, path)
            success = [code for code in responses if code.startswith("2")]
            assert success, (method, path)
            if method != "delete":
                assert all(ref(responses[code]) for code in success)
            assert operation.get("security"), (method, path)  # bearer or session


def test_request_bodies_forbid_unknown_fields(served: dict[str, Any]) -> None:
    schemas = served["components"]["schemas"]
    bodies = [name for name, schema in schemas.items() if name.endswith(("In", "Patch"))]
    assert {"JobIn", "JobPatch", "TerminateIn", "CapacityIn", "CapacityUnitIn", "QuotaShareIn",
            "QuotaSharePatch", "LimitIn", "TokenIn"} <= set(bodies)
    assert all(schemas[name]["additionalProperties"] is False for name in bodies)
    assert schemas["JobIn"]["properties"]["priority"]["maximum"] == 9999


def test_the_job_schema_has_every_field_of_api_md(served: dict[str, Any]) -> None:
    schemas = served["components"]["schemas"]
    assert set(schemas["JobOut"]["properties"]) >= JOB_FIELDS
    assert set(schemas["AttemptOut"]["properties"]) >= {
        "number", "scheduled_at", "started_at", "stopped_at", "outcome", "borrowed_instances",
        "warm_start", "status_reason"}
    assert set(schemas["JobWarmPoolOut"]["properties"]) == {
        "status", "keep_alive_seconds", "expires_at", "retained_billable_seconds", "reused_by",
        "termination_reason"}
    assert set(schemas["ErrorDetail"]["properties"]) == {"code", "message", "fields"}


def assert_invariants() -> None:
    """No job without a share; for every unit, the live shares' limits add up to at most
    its capacity (docs/semantics.md 2)."""
    assert not Job.objects.filter(quota_share__isnull=True).exists()
    assert not Job.objects.exclude(quota_share__in=QuotaShare.objects.all()).exists()
    capacity = dict(CapacityUnit.objects.values_list("name", "max_capacity"))
    totals = (CapacityLimit.objects.filter(quota_share__deleted_at__isnull=True)
              .values("capacity_unit").annotate(total=Sum("max_capacity")))
    for row in totals:
        assert row["total"] <= capacity.get(row["capacity_unit"], 0), row


def test_docs_api_md_describes_every_operation_of_the_schema() -> None:
    """Each method and path the API serves is written in docs/api.md (path parameters by
    any name): the reference a person reads is as complete as the schema."""
    from quotaweb.api.app import api

    text = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()

    def pattern(path: str) -> str:
        return re.sub(r"\{[^}]*\}", "{}", path)

    documented = {(method, pattern(path)) for method, path in re.findall(
        r"\b(GET|POST|PUT|PATCH|DELETE) (/api/v1/[^\s`?]*)", text)}
    served = {(method.upper(), pattern(path))
              for path, operations in api.get_openapi_schema()["paths"].items()
              for method in operations}
    assert served - documented == set()
