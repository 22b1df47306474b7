"""A fuzz run against the served OpenAPI schema (schemathesis): valid and invalid requests
for every operation, then stateful sequences that chain what one answer returns into the
next request (`schema.as_state_machine()`, links inferred from the schema), as an
administrator, a member and a member of nothing in turn.  2,000 requests or more in all:
no 5xx, every answer conforms to the schema, and the database's invariants hold after
it (tests.reliability.invariants)."""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.specs.openapi import checks as openapi_checks

from quotaweb.models import ApiToken, Job
from quotaweb.scheduling.tick import run_cycle
from quotaweb.services.jobs import submit_job, terminate_job
from tests.web import test_api_helpers as helpers
from tests.web.test_api_helpers import World

from .invariants import Expectations, assert_invariants

world = helpers.world  # a fixture

pytestmark = pytest.mark.django_db

SCHEMA_URL = "/api/v1/openapi.json"
EXAMPLES_PER_OPERATION = 66  # valid and invalid, for each of the 19 operations
STATEFUL_SCENARIOS = 66
STATEFUL_STEPS = 12
MINIMUM_REQUESTS = 2000
CHECKS = [
    schemathesis.checks.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_schema_conformance,
    openapi_checks.negative_data_rejection,
]
FUZZ = settings(deadline=None, suppress_health_check=list(HealthCheck), database=None,
                derandomize=True, phases=[Phase.explicit, Phase.generate])

schema = schemathesis.openapi.from_wsgi(SCHEMA_URL, get_wsgi_application())


class Callers:
    """Bearer headers of the administrator, a member of QS1 or a member of nothing, chosen
    by the request itself (the same request is always sent by the same caller, so that a
    sequence that Hypothesis replays gets the same answers); counts the requests and
    their statuses."""

    def __init__(self, world: World) -> None:
        tokens = [ApiToken.issue(world.users[role])[1] for role in ("admin", "member", "other")]
        self._headers = [{"Authorization": f"Bearer {t}"} for t in tokens]
        self.statuses: Counter[int] = Counter()
        self.failures: list[str] = []

    def headers(self, case: Any) -> dict[str, str]:
        # A fuzzed DELETE /tokens/{id} may revoke a caller's own token: keep them valid.
        ApiToken.objects.filter(revoked_at__isnull=False).update(revoked_at=None)
        request = repr((case.method, case.path, case.body, case.query, case.path_parameters))
        return dict(self._headers[zlib.crc32(request.encode()) % len(self._headers)])

    def validate(self, case: Any, response: Any) -> None:
        """Count the answer and check it; a failure is recorded, not raised, so that the
        run goes on (a failure replayed on a changed database would only confuse
        Hypothesis) and the end lists every distinct one."""
        self.statuses[response.status_code] += 1
        try:
            case.validate_response(response, checks=CHECKS)
        except Exception as error:  # noqa: BLE001 - schemathesis raises groups of failures
            first = str(error).strip().splitlines()[:6]
            self.failures.append(f"{case.method} {case.formatted_path} -> "
                                 f"{response.status_code}: {' | '.join(first)}\n"
                                 f"    body {case.body!r:.300}\n"
                                 f"    answer {response.text[:300]}")

    @property
    def total(self) -> int:
        return sum(self.statuses.values())


@pytest.fixture
def callers(world: World) -> Iterator[Callers]:
    """A small world with jobs in several states, made as the product makes them (the
    services, then a real cycle: the invariants hold from the start); while the test
    runs, requests keep the test's database connection (as django.test.Client does), so
    they see its transaction."""
    for share, count in (("QS1", 3), ("QS2", 2)):
        for number in range(count):
            submit_job(world.users["admin"], **helpers.submission(
                quota_share=share, name=f"{share}-{number}", priority=number))
    run_cycle()
    terminate_job(Job.objects.filter(status="SCHEDULED").first())
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield Callers(world)
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def fuzz_operation(operation: Any, callers: Callers) -> None:
    strategy = st.one_of(operation.as_strategy(GenerationMode.POSITIVE),
                         operation.as_strategy(GenerationMode.NEGATIVE))

    @settings(FUZZ, max_examples=EXAMPLES_PER_OPERATION)
    @given(case=strategy)
    def run(case: Any) -> None:
        callers.validate(case, case.call(headers=callers.headers(case)))

    run()


def stateful_machine(callers: Callers) -> Any:
    class Machine(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            # Every scenario starts from the same database: a replayed scenario must get
            # the same answers, or Hypothesis reports its own data generation as flaky.
            self._savepoint = transaction.savepoint()

        def teardown(self) -> None:
            transaction.savepoint_rollback(self._savepoint)

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": callers.headers(case)}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            callers.validate(case, response)

    return Machine


def test_fuzzing_the_api_finds_no_server_error_and_breaks_no_invariant(
    callers: Callers,
) -> None:
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 19
    for operation in operations:
        fuzz_operation(operation, callers)
    stateless = callers.total
    stateful_machine(callers).run(settings=settings(
        FUZZ, max_examples=STATEFUL_SCENARIOS, stateful_step_count=STATEFUL_STEPS))
    print(f"fuzz: {stateless} stateless + {callers.total - stateless} stateful requests; "
          f"statuses {dict(sorted(callers.statuses.items()))}")
    assert not callers.failures, f"{len(callers.failures)} failures:\n" + "\n".join(
        sorted(set(callers.failures))[:15])
    assert callers.total >= MINIMUM_REQUESTS, callers.statuses
    assert not any(status >= 500 for status in callers.statuses), callers.statuses
    # Stateful sequences really chained answers: some writes succeeded.
    assert callers.statuses[200] + callers.statuses[201] + callers.statuses[204] > 100
    # The fuzz changes the configuration (capacity, limits, strategies) on purpose, so the
    # accounting may be left "broken" by a configuration change, as SPEC.md 3 allows.
    assert_invariants(Expectations(config_changed=True))
