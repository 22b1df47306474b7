"""A fuzz run against the served OpenAPI schema (schemathesis): valid and invalid requests
for every operation, then stateful sequences that chain what one answer returns into the
next request (`schema.as_state_machine()`, links inferred from the schema), as an
administrator, a member and a member of nothing in turn.  2,000 requests or more in all:
no 5xx, every answer conforms to the schema, and the database's invariants hold after
it (tests.reliability.invariants)."""

from __future__ import annotations

import json
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

from quotaweb.models import ApiToken, Job, QuotaShare
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
# A body over the server's 1 MiB cap is refused with 413 before it is read (docs/api.md,
# errors): a rejection like the others, which schemathesis does not expect by default.
# Since `command` documents its 100,000-character limit, a batch of such invalid jobs can
# be that large.
_rejection = schema.config.checks.negative_data_rejection
_rejection.expected_statuses = [*_rejection.expected_statuses, "413"]


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
    # A per-minute limit answers by the clock: a replayed sequence would get 429 where
    # it got 201, and Hypothesis would call its own data generation flaky.  The limit has
    # its own tests (tests/web/test_queue_limits.py).
    QuotaShare.objects.update(max_submissions_per_minute=2_147_483_647)
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


# Thousands of requests through the whole stack: on a loaded 2-CPU machine this passes
# the suite's default 300 s limit, which is there to catch a hang, not to time anything.
@pytest.mark.timeout(1200)
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
    # accounting may be left "broken" by a configuration change, as docs/semantics.md 3 allows.
    assert_invariants(Expectations(config_changed=True))


# Text no column can store, in every string the schema names (issue 11) -----------------

BAD_TEXT = ("\ud800", "a\x00b", "\udfff" * 3, "\x00")
# A valid body of every operation that takes one; a bad string goes into one place of it.
BASE_BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("post", "/api/v1/jobs"): {**helpers.submission(), "role": "r", "client_token": "t",
                               "volume_kms_key_id": "k", "security_group_ids": ["sg"],
                               "subnets": ["s"], "environment": {"A": "1"}},
    ("post", "/api/v1/jobs/batch"): {"jobs": [helpers.submission(name="in-a-batch")]},
    ("patch", "/api/v1/jobs/{job_id}"): {"priority": 1},
    ("post", "/api/v1/jobs/{job_id}/terminate"): {"reason": "stop"},
    ("put", "/api/v1/capacity"): {"capacity_limits": [
        {"capacity_unit": helpers.UNIT, "max_capacity": 4}]},
    ("post", "/api/v1/quota-shares"): {"name": "QS9", "sharing_strategy": "LEND",
                                       "members": ["member"], "capacity_limits": [
                                           {"capacity_unit": helpers.UNIT, "max_capacity": 0}]},
    ("patch", "/api/v1/quota-shares/{name}"): {"state": "ENABLED", "members": ["member"],
                                               "capacity_limits": [{
                                                   "capacity_unit": helpers.UNIT,
                                                   "max_capacity": 2}]},
    ("post", "/api/v1/tokens"): {"name": "laptop", "expires_at": "2999-01-01T00:00:00Z"},
    ("post", "/api/v1/what-if"): {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T01:00:00Z",
                                  "capacity": [{"capacity_unit": helpers.UNIT,
                                                "max_capacity": 4}],
                                  "quota_shares": [{"name": "QS1", "sharing_strategy": "LEND",
                                                    "capacity_limits": [{
                                                        "capacity_unit": helpers.UNIT,
                                                        "max_capacity": 2}]}]},
}
PATH_VALUES = {"job_id": "{job}", "name": "QS1", "token_id": "1"}


def _resolve(node: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = components[node["$ref"].rsplit("/", 1)[1]]
    for key in ("anyOf", "allOf"):  # a nullable or annotated field: its non-null form
        for option in node.get(key, []):
            if option.get("type") != "null":
                return _resolve(option, components)
    return node


def string_places(node: dict[str, Any], components: dict[str, Any],
                  where: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place a string goes in a body of this schema: field names, [0] for an array's
    item, a ("key",) step for an object's keys and ("value",) for its values."""
    node = _resolve(node, components)
    kind = node.get("type")
    if kind == "string" or "enum" in node:
        return [where]
    if kind == "array":
        return string_places(node.get("items", {}), components, (*where, 0))
    places: list[tuple[Any, ...]] = []
    for name, field in node.get("properties", {}).items():
        places += string_places(field, components, (*where, name))
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and _resolve(extra, components).get("type") == "string":
        places += [(*where, ("key",)), (*where, ("value",))]
    return places


def _with_bad_text(body: Any, place: tuple[Any, ...], bad: str) -> Any:
    body = json.loads(json.dumps(body))
    if not place:
        return bad
    step, rest = place[0], place[1:]
    if step == ("key",):
        return {bad: "1"}
    if step == ("value",):
        return {"A": bad}
    if isinstance(step, int):
        items = body if isinstance(body, list) and body else [body[0] if body else "x"]
        return [_with_bad_text(items[0], rest, bad)]
    current = body.get(step) if isinstance(body, dict) else None
    if current is None:
        current = [] if rest and isinstance(rest[0], int) else {} if rest else ""
    return {**body, step: _with_bad_text(current, rest, bad)}


def test_lone_surrogates_and_nul_in_every_string_field_parameter_and_path_are_refused(
        world: World) -> None:
    """Every string of every request body (nested ones, list items and object keys and
    values included), every query parameter and every path parameter the schema names,
    holding a lone surrogate or a NUL: a 4xx in the error format, never a 5xx, and
    nothing changes."""
    from django.test import Client

    from tests.web.test_api_helpers import state

    target = submit_job(world.users["admin"], **helpers.submission(name="target"))[0].pk
    client = Client()
    client.force_login(world.users["admin"])  # a session may also create tokens
    served = client.get(SCHEMA_URL).json()
    components = served["components"]["schemas"]
    before = state()
    tried: Counter[str] = Counter()
    failures: list[str] = []

    def check(label: str, response: Any, statuses: tuple[int, ...]) -> None:
        tried[label.split()[0]] += 1
        body = response.json() if response.get("Content-Type") == "application/json" else None
        ok = (response.status_code in statuses and body is not None
              and set(body) == {"error"} and set(body["error"]) == {"code", "message", "fields"})
        if not ok:
            failures.append(f"{label} -> {response.status_code} {response.content[:200]!r}")

    for path, operations in served["paths"].items():
        for method, operation in operations.items():
            url = path
            for name, value in PATH_VALUES.items():
                url = url.replace(f"{{{name}}}", value.format(job=target))
            if "requestBody" in operation:
                base = BASE_BODIES[(method, path)]  # a new operation needs a valid body here
                body_schema = operation["requestBody"]["content"]["application/json"]["schema"]
                for place in string_places(body_schema, components):
                    for bad in BAD_TEXT:
                        sent = json.dumps(_with_bad_text(base, place, bad))
                        response = client.generic(method.upper(), url, sent,
                                                  content_type="application/json")
                        check(f"body {method} {path} {place} {bad!r}", response, (422,))
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "query":
                    response = client.generic(method.upper(), f"{url}?{parameter['name']}=a%00b")
                    check(f"query {method} {path} {parameter['name']}", response, (422,))
                elif parameter["in"] == "path":
                    bad_url = path.replace(f"{{{parameter['name']}}}", "a%00b")
                    for name, value in PATH_VALUES.items():
                        bad_url = bad_url.replace(f"{{{name}}}", value.format(job=target))
                    response = client.generic(method.upper(), bad_url)
                    check(f"path {method} {path} {parameter['name']}", response, (400,))
    assert not failures, f"{len(failures)} of {sum(tried.values())}:\n" + "\n".join(failures[:20])
    assert tried["body"] >= 80 and tried["query"] >= 10 and tried["path"] >= 8, tried
    assert state() == before
