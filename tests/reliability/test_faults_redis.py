"""Redis (the test's own) killed and restarted, empty, while jobs run and two websocket
clients watch: the cycle resumes, the clients reconnect with `?after=<last id>` and
resynchronise, and together with what they were shown live, no event is missing from
what GET /api/v1/events lists."""

from __future__ import annotations

import time

from .harness import PASSWORD, UNIT, System, signed_in_client, wait_for
from .live import Submitter, Watcher, api_events, bearer_client, running

OUTAGE_SECONDS = 3


def configure(system: System) -> str:
    """Two users who sign in (one a member of QS1) and ann's API token."""
    answer = system.drive("configure", {
        "users": [{"username": "ann", "password": PASSWORD},
                  {"username": "bob", "password": PASSWORD}],
        "units": [{"name": UNIT, "max_capacity": 3, "cold_start_seconds": 0,
                   "warm_start_seconds": 0}],
        "shares": [{"name": "QS1", "sharing_strategy": "LEND_AND_BORROW", "members": ["ann"],
                    "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 3}]}],
        "tokens": ["ann"],
    })
    token: str = answer["tokens"]["ann"]
    return token


def session_cookie(url: str, username: str) -> str:
    client = signed_in_client(url, username)
    try:
        return f"sessionid={client.cookies['sessionid']}"
    finally:
        client.close()


def test_redis_restart_loses_no_event_for_websocket_clients(system: System) -> None:
    token = configure(system)
    with system.diagnostics():
        ticker = system.start_ticker()
        system.start_beat()
        url = system.start_server()
        system.wait_ready(ticker)
        watchers = [Watcher(url, session_cookie(url, name)) for name in ("ann", "bob")]
        api = bearer_client(url, token)
        submitter = Submitter(api, "flow")
        with running(*watchers):
            with running(submitter):
                wait_for("both clients' first snapshot",
                         lambda: all(w.floor is not None for w in watchers), timeout=30)
                wait_for("events to flow to both clients",
                         lambda: all(len(w.seen) >= 5 for w in watchers), timeout=30)
                system.redis.kill()
                time.sleep(OUTAGE_SECONDS)
                system.redis.start()  # the same port, empty: no groups, queues or keys
                restarted_at = system.cycle_count()
                system.wait_cycles(3, "cycles to resume after Redis came back", timeout=60)
                time.sleep(3)  # jobs keep coming after the restart
            accepted = list(submitter.accepted)
            names = set(accepted)
            wait_for("every accepted job to succeed", lambda: all(
                status == "SUCCEEDED" for name, status in system.job_statuses().items()
                if name in names), timeout=60, on_poll=system.services.assert_running)
            events = [event["id"] for event in api_events(api)]
            # Every event is broadcast within a cycle of its commit: the clients catch up.
            caught_up = wait_for("both clients to be shown the last event", lambda: all(
                w.last >= events[-1] for w in watchers), timeout=30, raise_on_timeout=False)
        system.services.assert_running()

    assert system.cycle_count() > restarted_at
    for watcher in watchers:
        missing = watcher.missing(events)
        assert not missing, (
            f"{len(missing)} of the {len([i for i in events if i > (watcher.floor or 0)])} "
            f"events after {watcher.floor} were never shown to a client (connects "
            f"{watcher.connects}, caught up {bool(caught_up)}, last errors "
            f"{watcher.errors[-3:]}): {missing[:20]}...")
        assert watcher.snapshots_after_first == 0, "a reconnect got a snapshot, not the events"
    system.assert_invariants(names=accepted)
