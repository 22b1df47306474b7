"""What-if (quotaweb.services.what_if): recorded history replayed through the simulator.

The key check: a live run through the real shell (services and `run_cycle(now=...)` on a
virtual clock, as tests/web/test_shell_agrees_with_simulator.py runs it), then replayed
from what the database recorded with the configuration unchanged, gives back exactly what
happened: every job's attempts (starts, ends, outcomes, preemptions), its status, every
event and the metrics, also when an administrator changed the configuration during the
period.  A changed configuration then gives a different, sensible answer."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from quotaweb.services.errors import ValidationFailed
from quotaweb.services.recorded_history import MAX_PERIOD
from quotaweb.services.what_if import changed_configuration, what_if
from scheduler.simulate import parse_scenario, run_scenario

from .test_shell_agrees_with_simulator import (
    UNTIL,
    Shell,
    in_time_order,
    live_run,
    random_scenario,
)

pytestmark = pytest.mark.django_db(transaction=True)

# Between them: preemptions of both kinds, priority changes, terminations, keep-alive changes.
SEEDS = (1, 6)
UNIT = "ml.g5.xlarge"


def replayed_jobs(output: dict[str, Any], shell: Shell) -> list[dict[str, Any]]:
    """The replay's jobs in the shell's terms: a replayed job is named `name_id`."""
    jobs = []
    for job in output["jobs"]:
        row = {key: value for key, value in copy.deepcopy(job).items() if key != "position"}
        row["name"] = row["name"].rsplit("_", 1)[0]
        for attempt in row["attempts"]:
            if "preempted_by" in attempt:
                attempt["preempted_by"] = attempt["preempted_by"].rsplit("_", 1)[0]
        if row["warm_pool"] and row["warm_pool"]["reused_by"]:
            row["warm_pool"]["reused_by"] = row["warm_pool"]["reused_by"].rsplit("_", 1)[0]
        jobs.append(row)
    return jobs


def replayed_events(output: dict[str, Any]) -> list[dict[str, Any]]:
    def shell_name(name: str | None) -> str | None:
        return None if name is None else name.rsplit("_", 1)[0]

    events = []
    for event in copy.deepcopy(output["events"]):
        event["job"] = shell_name(event["job"])
        for key in ("preempted_by", "reused_by"):
            if key in event["details"]:
                event["details"][key] = shell_name(event["details"][key])
        events.append(event)
    return events


def with_configuration_changes(document: dict[str, Any]) -> dict[str, Any]:
    """An administrator lowers S0's limit at 15 s and raises the unit's max_capacity at 25 s
    (the shell applies them through the configuration services)."""
    limit = document["quota_shares"][0]["capacity_limits"][0]["max_capacity"]
    capacity = document["capacity"][0]["max_capacity"]
    changes = [
        {"at": 15, "update_share": {"name": "S0", "capacity_limits": [
            {"capacity_unit": UNIT, "max_capacity": limit - 1}]}},
        {"at": 25, "update_capacity": {"capacity_unit": UNIT, "max_capacity": capacity + 1}},
    ]
    # Stable: after the second's other actions, in the shell as in the simulator.
    actions = sorted(document["actions"] + changes, key=lambda action: action["at"])
    return {**document, "actions": actions}


@pytest.mark.parametrize("seed", SEEDS)
def test_the_unchanged_replay_gives_back_what_happened(
        seed: int, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    document = with_configuration_changes(random_scenario(seed))
    shell = live_run(document, settings, monkeypatch)

    result = what_if(shell.t0, shell.t0 + timedelta(seconds=UNTIL))

    assert replayed_jobs(result.recorded, shell) == shell.jobs()
    assert in_time_order(replayed_events(result.recorded)) == in_time_order(shell.events())
    assert result.recorded["metrics"] == run_scenario(document)["metrics"]
    # It starts from the configuration as it stood then, not today's.
    assert result.history.document["capacity"] == document["capacity"]
    assert result.history.document["quota_shares"][0]["capacity_limits"] == \
        document["quota_shares"][0]["capacity_limits"]
    # Nothing changed: both columns agree.
    assert result.changed["jobs"] == result.recorded["jobs"]
    assert all(row["recorded"] == row["changed"] for row in result.comparison)


def busy_history(monkeypatch: pytest.MonkeyPatch) -> Shell:
    """Two shares of one instance each, RESERVE: S1's queue of four 10 s jobs waits."""
    document = {
        "name": "busy", "tick_seconds": 1, "until": UNTIL,
        "settings": {"preemption_grace_seconds": 0, "warm_pool_max_lifetime_seconds": 100},
        "capacity": [{"capacity_unit": UNIT, "max_capacity": 4, "warm_pool_limit": 0,
                      "cold_start_seconds": 0, "warm_start_seconds": 0}],
        "quota_shares": [
            {"name": "S0", "sharing_strategy": "RESERVE",
             "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 1}]},
            {"name": "S1", "sharing_strategy": "RESERVE",
             "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 1}]},
        ],
        "actions": [{"at": 0, "submit": {"name": f"s1_{i}", "quota_share": "S1",
                                         "instance_type": UNIT, "duration_seconds": 10}}
                    for i in range(4)],
    }
    # The replay reads only the submissions: no cycle needs to run.
    shell = Shell(document, timezone.now().replace(microsecond=0))
    monkeypatch.setattr(timezone, "now", shell.clock)
    shell.configure()
    for action in document["actions"]:
        shell.act(action)
    return shell


def test_raising_a_limit_lowers_the_wait_and_bad_changes_are_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    shell = busy_history(monkeypatch)
    end = shell.t0 + timedelta(seconds=UNTIL)

    result = what_if(shell.t0, end, quota_shares=[
        {"name": "S1", "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 3}]}])

    s1 = next(row for row in result.comparison if row["quota_share"] == "S1")
    assert s1["recorded"]["mean_wait_seconds"] == 15  # waits 0, 10, 20, 30
    assert s1["recorded"]["p95_wait_seconds"] == 30
    assert s1["changed"]["mean_wait_seconds"] == 2.5  # waits 0, 0, 0, 10
    assert s1["changed"]["instance_hours"] == s1["recorded"]["instance_hours"]
    assert result.changed["metrics"]["utilization"] == result.recorded["metrics"]["utilization"]


    # Bad changes and periods are refused, naming the field.
    with pytest.raises(ValidationFailed) as unknown:
        what_if(shell.t0, end, quota_shares=[{"name": "nope", "in_share_preemption": True}])
    assert "quota_shares" in unknown.value.fields
    with pytest.raises(ValidationFailed) as over:  # Σ limits 5 > capacity 4
        what_if(shell.t0, end, quota_shares=[
            {"name": "S1", "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 4}]}])
    assert "quota_shares" in over.value.fields
    with pytest.raises(ValidationFailed):
        what_if(end, shell.t0)
    with pytest.raises(ValidationFailed):
        what_if(end - MAX_PERIOD - timedelta(seconds=1), end)


def test_a_proposed_field_holds_for_the_whole_period_and_other_recorded_changes_replay(
) -> None:
    def limits(limit: int) -> list[dict[str, Any]]:
        return [{"capacity_unit": UNIT, "max_capacity": limit}]

    job = {"name": "j_1", "quota_share": "S0", "instance_type": UNIT, "duration_seconds": 5}
    recorded = {
        "name": "recorded", "tick_seconds": 1, "until": UNTIL,
        "capacity": [{"capacity_unit": UNIT, "max_capacity": 4, "warm_pool_limit": 0}],
        "quota_shares": [
            {"name": "S0", "sharing_strategy": "LEND_AND_BORROW", "borrow_limit": 100,
             "capacity_limits": limits(1)},
            {"name": "S1", "sharing_strategy": "RESERVE", "capacity_limits": limits(1)},
            # Created at 30 s: held DISABLED with no capacity until then.
            {"name": "S2", "sharing_strategy": "RESERVE", "state": "DISABLED",
             "capacity_limits": limits(0)}],
        "actions": [
            {"at": 0, "submit": job},
            {"at": 10, "update_share": {"name": "S0", "capacity_limits": limits(0),
                                        "in_share_preemption": True}},
            {"at": 12, "update_share": {"name": "S0", "sharing_strategy": "LEND"}},
            {"at": 14, "update_share": {"name": "S1", "capacity_limits": limits(2)}},
            {"at": 20, "update_capacity": {"capacity_unit": UNIT, "max_capacity": 5,
                                           "warm_pool_limit": 1}},
            {"at": 30, "update_share": {"name": "S2", "capacity_limits": limits(1),
                                        "sharing_strategy": "LEND", "state": "ENABLED"}},
            {"at": 30, "update_capacity": {"capacity_unit": "gpu.new", "max_capacity": 1}},
            {"at": 40, "update_share": {"name": "S2", "capacity_limits": limits(0)}},
        ],
    }

    changed = changed_configuration(
        recorded, [{"capacity_unit": UNIT, "warm_pool_limit": 2},
                   {"capacity_unit": "gpu.new", "max_capacity": 3}],
        [{"name": "S0", "capacity_limits": limits(2), "borrow_limit": 50},
         {"name": "S2", "capacity_limits": limits(1)}], created_shares={"S2"})

    assert changed["capacity"][0]["warm_pool_limit"] == 2
    assert changed["quota_shares"][0] == {
        "name": "S0", "sharing_strategy": "LEND_AND_BORROW", "borrow_limit": 50,
        "capacity_limits": limits(2)}
    assert changed["quota_shares"][2]["capacity_limits"] == limits(0)
    # S0's limits and its strategy (borrow_limit holds it) and the unit's warm_pool_limit
    # are the administrator's throughout; the other recorded changes still replay.  What
    # is created in the period takes the changes from its creation on.
    assert changed["actions"] == [
        {"at": 0, "submit": job},
        {"at": 10, "update_share": {"name": "S0", "in_share_preemption": True}},
        {"at": 14, "update_share": {"name": "S1", "capacity_limits": limits(2)}},
        {"at": 20, "update_capacity": {"capacity_unit": UNIT, "max_capacity": 5}},
        {"at": 30, "update_share": {"name": "S2", "capacity_limits": limits(1),
                                    "sharing_strategy": "LEND", "state": "ENABLED"}},
        {"at": 30, "update_capacity": {"capacity_unit": "gpu.new", "max_capacity": 3}},
    ]
    assert recorded["actions"][1]["update_share"]["capacity_limits"] == limits(0)
    parse_scenario(changed)  # a valid scenario


def two_sweeps_history(monkeypatch: pytest.MonkeyPatch) -> Shell:
    """Two teams without limits of their own borrow the 4 idle instances: A submitted a
    sweep of 8 ten-second jobs just before B submitted its 8."""
    document = {
        "name": "two sweeps", "tick_seconds": 1, "until": UNTIL,
        "settings": {"preemption_grace_seconds": 0, "warm_pool_max_lifetime_seconds": 100},
        "capacity": [{"capacity_unit": UNIT, "max_capacity": 4, "warm_pool_limit": 0,
                      "cold_start_seconds": 0, "warm_start_seconds": 0}],
        "quota_shares": [
            {"name": name, "sharing_strategy": "LEND_AND_BORROW",
             "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 0}]}
            for name in ("A", "B")],
        "actions": [{"at": 0, "submit": {"name": f"{share.lower()}_{i}", "quota_share": share,
                                         "instance_type": UNIT, "duration_seconds": 10}}
                    for share in ("A", "B") for i in range(8)],
    }
    shell = Shell(document, timezone.now().replace(microsecond=0))
    monkeypatch.setattr(timezone, "now", shell.clock)
    shell.configure()
    for action in document["actions"]:
        shell.act(action)
    return shell


def test_fair_sharing_in_a_what_if_changes_the_waits_per_share(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/semantics.md 5.4 replayed: first come, A's sweep takes every idle instance and
    B waits behind it; with fair sharing they alternate, and a weight tilts it."""
    shell = two_sweeps_history(monkeypatch)
    end = shell.t0 + timedelta(seconds=UNTIL)

    fair = what_if(shell.t0, end, fair_sharing=True)

    waits = {row["quota_share"]: (row["recorded"]["mean_wait_seconds"],
                                  row["changed"]["mean_wait_seconds"])
             for row in fair.comparison}
    assert waits["A"] == (5, 15)  # 0,0,0,0,10,10,10,10 → 0,0,10,10,20,20,30,30
    assert waits["B"] == (25, 15)  # 20,…,30 → as A's
    assert fair.as_dict()["fair_sharing"] == {"recorded": False, "changed": True}

    # A unit may turn it on alone, and a weight of 3 gives B three instances in four.
    weighted = what_if(shell.t0, end, capacity=[{"capacity_unit": UNIT, "fair_sharing": True}],
                       quota_shares=[{"name": "B", "fair_share_weight": 3}])
    b = next(row for row in weighted.comparison if row["quota_share"] == "B")
    assert b["changed"]["mean_wait_seconds"] < 15
    assert weighted.changed_document["quota_shares"][1]["fair_share_weight"] == 3
    assert weighted.changed_document["capacity"][0]["fair_sharing"] is True

    # A minimum runtime is carried too (here nothing is preempted: nothing changes).
    same = what_if(shell.t0, end, quota_shares=[{"name": "A", "min_runtime_seconds": 30}])
    assert all(row["recorded"] == row["changed"] for row in same.comparison)
    with pytest.raises(ValidationFailed) as bad:
        what_if(shell.t0, end, quota_shares=[{"name": "A", "fair_share_weight": 0}])
    assert "quota_shares" in bad.value.fields

    # A half-life is carried into the changed replay (docs/semantics.md 5.4).
    decayed = what_if(shell.t0, end, fair_sharing=True, fair_share_half_life_seconds=30)
    assert decayed.changed_document["settings"]["fair_share_half_life_seconds"] == 30
    assert decayed.as_dict()["fair_share_half_life_seconds"] == {"recorded": 0, "changed": 30}
    with pytest.raises(ValidationFailed) as bad:
        what_if(shell.t0, end, fair_share_half_life_seconds=-1)
    assert "fair_share_half_life_seconds" in bad.value.fields


def test_a_server_half_life_is_replayed_and_noted(monkeypatch: pytest.MonkeyPatch,
                                                   settings: Any) -> None:
    """docs/semantics.md 5.4: the recorded replay keeps the server's half-life, and says
    that past borrowing before the period is not replayed."""
    settings.QUOTAWEB = {**settings.QUOTAWEB, "FAIR_SHARE_HALF_LIFE_SECONDS": 600}
    shell = two_sweeps_history(monkeypatch)
    result = what_if(shell.t0, shell.t0 + timedelta(seconds=UNTIL))
    assert result.history.document["settings"]["fair_share_half_life_seconds"] == 600
    assert result.as_dict()["fair_share_half_life_seconds"] == {"recorded": 600,
                                                                "changed": 600}
    assert any("past borrowing" in note for note in result.history.notes)
