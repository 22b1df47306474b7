"""The served OpenAPI schema describes the whole API, and the API keeps to it: a
schemathesis run (property-based requests generated from the schema, as an administrator)
gets no 5xx and only responses that conform to the schema, and leaves the database's
invariants intact."""

from __future__ import annotations

from collections.abc import Iterator
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


def assert_invariants() -> None:
    """No job without a share; for every unit, the live shares' limits add up to at most
    its capacity (SPEC.md 2)."""
    assert not Job.objects.filter(quota_share__isnull=True).exists()
    assert not Job.objects.exclude(quota_share__in=QuotaShare.objects.all()).exists()
    capacity = dict(CapacityUnit.objects.values_list("name", "max_capacity"))
    totals = (CapacityLimit.objects.filter(quota_share__deleted_at__isnull=True)
              .values("capacity_unit").annotate(total=Sum("max_capacity")))
    for row in totals:
        assert row["total"] <= capacity.get(row["capacity_unit"], 0), row
