"""The Django admin through the test client, against the real PostgreSQL: configuration
saved through services.configuration (an invalid one shows the field's error and saves
nothing), jobs changed only through services.jobs, and the engine's tables read-only."""

from __future__ import annotations

import html
from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin as django_admin
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from quotaweb.models import (
    ApiToken,
    Attempt,
    CapacityLimit,
    CapacityUnit,
    Event,
    Job,
    QuotaShare,
    WarmPool,
    WarmPoolSegment,
)
from quotaweb.services import jobs

pytestmark = pytest.mark.django_db
UNIT = "ml.g5.xlarge"
# The management form of the read-only attempts inline on a job's page.
NO_ATTEMPTS = {"attempts-TOTAL_FORMS": "0", "attempts-INITIAL_FORMS": "0"}
SUM_ERROR = "Quota shares' limits on ml.g5.xlarge would add up to 4, above its max_capacity 3."


def url(model: str, view: str, *args: Any) -> str:
    return reverse(f"admin:quotaweb_{model}_{view}", args=args)


def share_form(name: str = "QS4", strategy: str = "LEND", borrow_limit: str = "",
               share: QuotaShare | None = None, limits: list[tuple[str, int]] | None = None,
               **fields: str) -> dict[str, Any]:
    """The admin's add/change form for a share with its capacity-limit inline."""
    existing = list(share.capacity_limits.all()) if share is not None else []
    rows = limits if limits is not None else [(UNIT, 1)]
    data: dict[str, Any] = {
        "name": name, "sharing_strategy": strategy, "borrow_limit": borrow_limit,
        "state": "ENABLED", "max_keep_alive_seconds": "3600",
        "capacity_limits-TOTAL_FORMS": str(max(len(rows), len(existing))),
        "capacity_limits-INITIAL_FORMS": str(len(existing)),
        "capacity_limits-MIN_NUM_FORMS": "1", "capacity_limits-MAX_NUM_FORMS": "5",
        "_save": "Save",
        "members": [str(user.pk) for user in share.members.all()] if share is not None else [],
        **fields,
    }
    for index, (unit, limit) in enumerate(rows):
        data[f"capacity_limits-{index}-capacity_unit"] = unit
        data[f"capacity_limits-{index}-max_capacity"] = str(limit)
        if index < len(existing):
            data[f"capacity_limits-{index}-id"] = str(existing[index].pk)
            data[f"capacity_limits-{index}-quota_share"] = str(share.pk)  # type: ignore[union-attr]
    return data


def inline_errors(response: Any) -> list[str]:
    return list(response.context["inline_admin_formsets"][0].formset.non_form_errors())


def form_errors(response: Any) -> dict[str, list[str]]:
    return {k: list(v) for k, v in response.context["adminform"].form.errors.items()}


# Quota shares ---------------------------------------------------------------------------


def test_an_invalid_share_shows_the_field_error_and_saves_nothing(
        walkthrough_config: Any, admin_client: Client) -> None:
    response = admin_client.post(url("quotashare", "add"), share_form(limits=[(UNIT, 1)]))
    assert response.status_code == 200
    assert inline_errors(response) == [SUM_ERROR]
    assert html.escape(SUM_ERROR) in response.content.decode()
    assert not QuotaShare.objects.filter(name="QS4").exists()
    assert CapacityLimit.objects.count() == 3
    assert not Event.objects.exists()


def test_a_valid_share_is_saved_through_the_service(walkthrough_config: Any,
                                                    admin_client: Client,
                                                    member: User) -> None:
    CapacityUnit.objects.filter(name=UNIT).update(max_capacity=4)
    response = admin_client.post(url("quotashare", "add"), share_form(
        strategy="LEND_AND_BORROW", members=[str(member.pk)], in_share_preemption="on"))
    assert response.status_code == 302, form_errors(response)
    share = QuotaShare.live.get(name="QS4")
    assert (share.sharing_strategy, share.borrow_limit, share.in_share_preemption) == (
        "LEND_AND_BORROW", -1, True)
    assert list(share.capacity_limits.values_list("capacity_unit", "max_capacity")) == [
        (UNIT, 1)]
    assert list(share.members.all()) == [member]
    [event] = Event.objects.all()
    assert (event.type, event.quota_share) == ("SHARE_UPDATED", "QS4")


def test_share_field_errors_are_shown_on_their_fields(walkthrough_config: Any,
                                                      admin_client: Client) -> None:
    response = admin_client.post(url("quotashare", "add"), share_form(
        name="QS1", borrow_limit="50", limits=[(UNIT, 0)]))
    assert response.status_code == 200
    errors = form_errors(response)
    assert errors["name"] == ["A quota share named QS1 already exists."]
    assert errors["borrow_limit"] == [
        "borrow_limit is only allowed with LEND_AND_BORROW, not with LEND."]
    assert QuotaShare.objects.count() == 3


def test_the_limits_inline_needs_distinct_units(walkthrough_config: Any,
                                                admin_client: Client) -> None:
    response = admin_client.post(url("quotashare", "add"), share_form(
        limits=[(UNIT, 0), (UNIT, 0)]))
    assert response.status_code == 200
    assert QuotaShare.objects.count() == 3


def test_changing_a_share_raising_its_limit_past_capacity_is_refused(
        walkthrough_config: Any, admin_client: Client) -> None:
    qs2 = walkthrough_config.qs2
    response = admin_client.post(url("quotashare", "change", qs2.pk),
                                 share_form(share=qs2, limits=[(UNIT, 2)]))
    assert response.status_code == 200
    assert inline_errors(response) == [SUM_ERROR]
    assert qs2.capacity_limits.get().max_capacity == 1


def test_changing_only_the_strategy_clears_borrow_limit(walkthrough_config: Any,
                                                        admin_client: Client) -> None:
    qs1 = walkthrough_config.qs1
    data = share_form(share=qs1, strategy="LEND", borrow_limit="200", in_share_preemption="on")
    response = admin_client.post(url("quotashare", "change", qs1.pk), data)
    assert response.status_code == 302, form_errors(response)
    qs1.refresh_from_db()
    assert (qs1.sharing_strategy, qs1.borrow_limit) == ("LEND", None)
    [event] = Event.objects.all()
    assert event.details == {
        "fields": ["sharing_strategy"],
        "before": {"borrow_limit": 200, "sharing_strategy": "LEND_AND_BORROW"},
        "after": {"borrow_limit": None, "sharing_strategy": "LEND"}}


def test_moving_capacity_between_limits_in_one_save(walkthrough_config: Any,
                                                    admin_client: Client) -> None:
    qs1 = walkthrough_config.qs1
    admin_client.post(url("quotashare", "change", walkthrough_config.qs3.pk),
                      share_form(name="QS3", strategy="RESERVE", share=walkthrough_config.qs3,
                                 limits=[(UNIT, 0)]))
    response = admin_client.post(url("quotashare", "change", qs1.pk), share_form(
        share=qs1, strategy="LEND_AND_BORROW", borrow_limit="200", limits=[(UNIT, 2)],
        in_share_preemption="on"))
    assert response.status_code == 302, inline_errors(response)
    assert qs1.capacity_limits.get().max_capacity == 2
    def limits(limit: int) -> dict[str, Any]:
        return {"capacity_limits": [{"capacity_unit": UNIT, "max_capacity": limit}]}

    assert [e.details for e in Event.objects.order_by("id")] == [
        {"fields": ["capacity_limits"], "before": limits(1), "after": limits(0)},
        {"fields": ["capacity_limits"], "before": limits(1), "after": limits(2)}]


def test_only_a_disabled_share_can_be_deleted_and_deleting_is_soft(
        walkthrough_config: Any, admin_client: Client, member: User) -> None:
    qs2 = walkthrough_config.qs2
    assert admin_client.get(url("quotashare", "delete", qs2.pk)).status_code == 403
    job, _ = jobs.submit_job(member, name="a", quota_share="QS2", instance_type=UNIT,
                             duration_seconds=5)
    QuotaShare.objects.filter(pk=qs2.pk).update(state="DISABLED")
    assert admin_client.get(url("quotashare", "delete", qs2.pk)).status_code == 200
    response = admin_client.post(url("quotashare", "delete", qs2.pk), {"post": "yes"})
    assert response.status_code == 302
    qs2.refresh_from_db()
    assert qs2.deleted_at is not None
    job.refresh_from_db()
    assert (job.status, job.status_reason) == ("FAILED", "Quota share deleted")
    changelist = admin_client.get(url("quotashare", "changelist")).content.decode()
    assert "QS1" in changelist and ">QS2<" not in changelist


def test_the_bulk_delete_action_refuses_enabled_shares(walkthrough_config: Any,
                                                       admin_client: Client) -> None:
    QuotaShare.objects.filter(name="QS3").update(state="DISABLED")
    shares = [str(walkthrough_config.qs2.pk), str(walkthrough_config.qs3.pk)]
    response = admin_client.post(url("quotashare", "changelist"), {
        "action": "delete_disabled_shares", "_selected_action": shares}, follow=True)
    text = response.content.decode()
    assert "Quota share QS2 is ENABLED" in text
    assert list(QuotaShare.live.values_list("name", flat=True)) == ["QS1", "QS2"]


# Capacity -------------------------------------------------------------------------------


def test_lowering_capacity_below_the_limits_shows_the_error(walkthrough_config: Any,
                                                            admin_client: Client) -> None:
    unit = walkthrough_config.unit
    response = admin_client.post(url("capacityunit", "change", unit.pk), {
        "max_capacity": "2", "warm_pool_limit": "0", "cold_start_seconds": "60",
        "warm_start_seconds": "5", "_save": "Save"})
    assert response.status_code == 200
    assert form_errors(response) == {"max_capacity": [
        "Quota shares' limits on ml.g5.xlarge would add up to 3, above its max_capacity 2."]}
    unit.refresh_from_db()
    assert unit.max_capacity == 3 and not Event.objects.exists()


def test_capacity_units_are_added_and_changed_through_the_service(
        walkthrough_config: Any, admin_client: Client) -> None:
    response = admin_client.post(url("capacityunit", "add"), {
        "name": "ml.p4d.24xlarge", "max_capacity": "2", "warm_pool_limit": "1",
        "cold_start_seconds": "30", "warm_start_seconds": "2", "_save": "Save"})
    assert response.status_code == 302, form_errors(response)
    unit = walkthrough_config.unit
    response = admin_client.post(url("capacityunit", "change", unit.pk), {
        "max_capacity": "5", "warm_pool_limit": "2", "cold_start_seconds": "60",
        "warm_start_seconds": "5", "_save": "Save"})
    assert response.status_code == 302, form_errors(response)
    assert CapacityUnit.objects.get(name=UNIT).max_capacity == 5
    assert [e.details for e in Event.objects.order_by("id")] == [
        {"capacity_unit": "ml.p4d.24xlarge", "before": None, "after": {
            "max_capacity": 2, "warm_pool_limit": 1, "cold_start_seconds": 30,
            "warm_start_seconds": 2, "memory_mib_per_instance": 4096, "cpus_per_instance": 1,
            "run_dir_mib_per_instance": 1024}},
        {"capacity_unit": UNIT, "before": {"max_capacity": 3, "warm_pool_limit": 0},
         "after": {"max_capacity": 5, "warm_pool_limit": 2}}]


def test_a_refusal_at_save_time_saves_nothing_and_says_why(
        walkthrough_config: Any, admin_client: Client, member: User,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The form is checked before the save takes its locks; if another administrator
    changed the configuration in between, the service refuses and the admin says so."""
    from quotaweb.services import configuration

    qs2 = walkthrough_config.qs2

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise configuration.ConfigurationError({"capacity_limits": [SUM_ERROR]})

    monkeypatch.setattr(configuration, "update_share", refuse)
    response = admin_client.post(url("quotashare", "change", qs2.pk),
                                 share_form(name="QS2", share=qs2, state="DISABLED"),
                                 follow=True)
    assert response.status_code == 200
    assert f"Nothing was saved: {SUM_ERROR}" in [str(m) for m in response.context["messages"]]
    qs2.refresh_from_db()
    assert qs2.state == "ENABLED" and not Event.objects.exists()


def test_a_unit_with_share_limits_cannot_be_deleted(walkthrough_config: Any,
                                                    admin_client: Client) -> None:
    unit = walkthrough_config.unit
    assert admin_client.get(url("capacityunit", "delete", unit.pk)).status_code == 403


# Jobs -----------------------------------------------------------------------------------


def test_priority_is_changed_through_update_priority(walkthrough_config: Any,
                                                     admin_client: Client,
                                                     member: User) -> None:
    job, _ = jobs.submit_job(member, name="a", quota_share="QS1", instance_type=UNIT,
                             duration_seconds=5)
    now = timezone.now()
    attempt = Attempt.objects.create(job=job, number=1, instances=[0], scheduled_at=now,
                                     starting_at=now, outcome="PREEMPTED")
    # What the browser posts: the attempts inline's rows come back, read-only.
    response = admin_client.post(url("job", "change", job.pk), {
        "priority": "4", "name": "renamed", "_save": "Save",
        "attempts-TOTAL_FORMS": "1", "attempts-INITIAL_FORMS": "1",
        "attempts-0-id": str(attempt.pk), "attempts-0-job": str(job.pk)})
    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.priority, job.name) == (4, "a")  # every other field is read-only
    assert list(Event.objects.order_by("id").values_list("type", flat=True)) == [
        "SUBMITTED", "PRIORITY_UPDATED"]
    response = admin_client.post(url("job", "change", job.pk),
                                 {"priority": "10000", **NO_ATTEMPTS})
    assert response.status_code == 200 and "priority" in form_errors(response)


def test_jobs_are_not_added_or_deleted_in_the_admin(walkthrough_config: Any,
                                                    admin_client: Client,
                                                    member: User) -> None:
    job, _ = jobs.submit_job(member, name="a", quota_share="QS1", instance_type=UNIT,
                             duration_seconds=5)
    assert admin_client.get(url("job", "add")).status_code == 403
    assert admin_client.get(url("job", "delete", job.pk)).status_code == 403


def test_terminate_selected_jobs(walkthrough_config: Any, admin_client: Client,
                                 member: User) -> None:
    first, _ = jobs.submit_job(member, name="a", quota_share="QS1", instance_type=UNIT,
                               duration_seconds=5)
    second, _ = jobs.submit_job(member, name="b", quota_share="QS2", instance_type=UNIT,
                                duration_seconds=5)
    done, _ = jobs.submit_job(member, name="c", quota_share="QS2", instance_type=UNIT,
                              duration_seconds=5)
    Job.objects.filter(pk=done.pk).update(status="SUCCEEDED")
    response = admin_client.post(url("job", "changelist"), {
        "action": "terminate_selected",
        "_selected_action": [str(first.pk), str(second.pk), str(done.pk)]}, follow=True)
    assert response.status_code == 200
    assert "Terminated jobs: 2." in response.content.decode()
    for job in (first, second):
        job.refresh_from_db()
        assert (job.status, job.status_reason) == ("FAILED", "Terminated by admin in the admin")
    done.refresh_from_db()
    assert done.status == "SUCCEEDED"
    terminated = Event.objects.filter(type="TERMINATED").order_by("id")
    assert [e.job_id for e in terminated] == [first.pk, second.pk]


# Read-only tables, tokens ---------------------------------------------------------------


def test_every_model_has_a_working_admin_list(walkthrough_config: Any, admin_client: Client,
                                              member: User) -> None:
    job, _ = jobs.submit_job(member, name="a", quota_share="QS1", instance_type=UNIT,
                             duration_seconds=5, keep_alive_seconds=10)
    registered = [m for m in django_admin.site._registry if m._meta.app_label == "quotaweb"]
    assert len(registered) == 13
    for model in registered:
        name = model._meta.model_name
        response = admin_client.get(url(name, "changelist"))
        assert response.status_code == 200, name
    assert admin_client.get(url("job", "change", job.pk)).status_code == 200
    assert admin_client.get(url("quotashare", "add")).status_code == 200
    event = Event.objects.get()
    assert admin_client.get(url("event", "change", event.pk)).status_code == 200
    assert admin_client.get(url("event", "add")).status_code == 403


def test_an_available_pool_can_be_terminated_from_the_admin(walkthrough_config: Any,
                                                            admin_client: Client,
                                                            member: User) -> None:
    job, _ = jobs.submit_job(member, name="a", quota_share="QS1", instance_type=UNIT,
                             duration_seconds=5, keep_alive_seconds=300)
    now = timezone.now()
    Job.objects.filter(pk=job.pk).update(status="SUCCEEDED")
    pool = WarmPool.objects.create(
        quota_share=walkthrough_config.qs1, owner=job, instance_type=UNIT, instance_count=1,
        instances=[0], status="Available", chain_started_at=now, available_since=now,
        expires_at=now + timedelta(seconds=300))
    WarmPoolSegment.objects.create(job=job, pool=pool, status="Available", keep_alive_seconds=300,
                                   available_since=now, expires_at=pool.expires_at)
    admin_client.post(url("warmpool", "changelist"), {
        "action": "terminate_available", "_selected_action": [str(pool.pk)]})
    pool.refresh_from_db()
    assert (pool.status, pool.termination_reason) == ("Terminated", "USER")


def test_a_token_is_created_and_its_secret_shown_once(admin_client: Client,
                                                      member: User) -> None:
    response = admin_client.post(url("apitoken", "add"), {
        "user": str(member.pk), "name": "ci", "_save": "Save"}, follow=True)
    assert response.status_code == 200
    token = ApiToken.objects.get()
    shown = [str(m) for m in response.context["messages"]]
    [raw] = [word for text in shown for word in text.split() if word.startswith("qw_")]
    assert ApiToken.hash(raw) == token.digest and raw.startswith(token.prefix)
    assert (token.user, token.name) == (member, "ci")


def test_staff_without_permissions_and_members_cannot_use_the_admin(
        walkthrough_config: Any, client_for: Any, member: User) -> None:
    response = client_for(member).get(url("quotashare", "changelist"))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
