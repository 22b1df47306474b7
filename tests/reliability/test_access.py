"""Who may do what (docs/api.md), everywhere: every API write (by bearer token and by session
with CSRF), every dashboard form, the admin, and the websocket, each tried by an
administrator, a member of the share, a member of another share, a signed-in member of
nothing and an anonymous caller.  Only the allowed succeed; a refusal changes nothing.

Dashboard forms covered (quotaweb/web/urls.py): submit, job priority, job terminate, job
keep-alive, warm-pool keep-alive, share change, capacity unit add, change and delete.
Every dashboard page of the issue exists (overview, fleet, share, job, submit, warm pools,
capacity); none is missing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib import admin as django_admin
from django.test import Client
from django.urls import reverse

from quotaweb.models import ApiToken, CapacityUnit, Job, QuotaShare
from tests.web import test_api_helpers as helpers
from tests.web.test_api_helpers import ROLES, UNIT, World, available_pool, job, state

pytestmark = pytest.mark.django_db

world = helpers.world  # a fixture: admin, member (QS1), qs2_member (QS2), other

OK, REFUSED, LOGIN, UNAUTHORIZED = "ok", "refused", "login", "401"
# Expected outcome for admin, member (of QS1), qs2_member, other, anonymous.
EVERYONE_SIGNED_IN = (OK, OK, OK, OK, UNAUTHORIZED)
SHARE_WRITE = (OK, OK, REFUSED, REFUSED)
ADMIN_ONLY = (OK, REFUSED, REFUSED, REFUSED)


def targets(world: World, role: str) -> dict[str, int]:
    """What the writes act on: a queued QS1 job, a finished QS1 job with an Available
    pool, QS3 DISABLED (so it may be deleted), a spare capacity unit (so it may be
    removed), and a token of the caller's own."""
    QuotaShare.objects.filter(name="QS3").update(state="DISABLED")
    finished = job("QS1")
    pool = available_pool(finished)
    spare = CapacityUnit.objects.create(name="ml.spare", max_capacity=1)
    own_token, _ = ApiToken.issue(world.users.get(role, world.users["admin"]), name="mine")
    return {"queued": job("QS1", status="RUNNABLE").id, "finished": finished.id,
            "pool": pool.id, "unit": world.unit.id, "spare": spare.id, "token": own_token.id}


def client_of(world: World, role: str, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    if role != "anonymous":
        client.force_login(world.users[role])
    return client


# The API, by bearer token and by session ------------------------------------------------


@dataclass(frozen=True)
class ApiWrite:
    method: str
    url: str
    body: Any
    outcomes: tuple[str, ...]
    success: int
    # When a bearer token may do less than the session (creating tokens: issue 11).
    bearer_outcomes: tuple[str, ...] | None = None


API_WRITES = {
    "put capacity": ApiWrite("put", "/api/v1/capacity", {"capacity_limits": [
        {"capacity_unit": UNIT, "max_capacity": 6}]}, (*ADMIN_ONLY, UNAUTHORIZED), 200),
    "create share": ApiWrite("post", "/api/v1/quota-shares", {
        "name": "QS9", "sharing_strategy": "LEND",
        "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 0}]},
        (*ADMIN_ONLY, UNAUTHORIZED), 201),
    "change share": ApiWrite("patch", "/api/v1/quota-shares/QS1", {"max_keep_alive_seconds": 60},
                             (*ADMIN_ONLY, UNAUTHORIZED), 200),
    "delete share": ApiWrite("delete", "/api/v1/quota-shares/QS3", None,
                             (*ADMIN_ONLY, UNAUTHORIZED), 204),
    "submit job": ApiWrite("post", "/api/v1/jobs", helpers.submission(),
                           (*SHARE_WRITE, UNAUTHORIZED), 201),
    "change priority": ApiWrite("patch", "/api/v1/jobs/{queued}", {"priority": 9},
                                (*SHARE_WRITE, UNAUTHORIZED), 200),
    "change keep-alive": ApiWrite("patch", "/api/v1/jobs/{finished}", {"keep_alive_seconds": 60},
                                  (*SHARE_WRITE, UNAUTHORIZED), 200),
    "terminate job": ApiWrite("post", "/api/v1/jobs/{queued}/terminate", {"reason": "stop"},
                              (*SHARE_WRITE, UNAUTHORIZED), 200),
    "create token": ApiWrite("post", "/api/v1/tokens", {"name": "ci"}, EVERYONE_SIGNED_IN, 201,
                             bearer_outcomes=(REFUSED, REFUSED, REFUSED, REFUSED,
                                              UNAUTHORIZED)),
    "revoke all own tokens": ApiWrite("post", "/api/v1/tokens/revoke-all", None,
                                      EVERYONE_SIGNED_IN, 200),
    "revoke own token": ApiWrite("delete", "/api/v1/tokens/{token}", None, EVERYONE_SIGNED_IN,
                                 204),
}


def api_call(client: Client, write: ApiWrite, ids: dict[str, int],
             headers: dict[str, str]) -> int:
    data = json.dumps(write.body) if write.body is not None else ""
    response = getattr(client, write.method)(write.url.format(**ids), data=data,
                                             content_type="application/json", headers=headers)
    return int(response.status_code)


@pytest.mark.parametrize("auth", ["bearer", "session"])
@pytest.mark.parametrize("name", list(API_WRITES))
def test_every_api_write_for_every_role(world: World, name: str, auth: str) -> None:
    write = API_WRITES[name]
    outcomes = write.bearer_outcomes if auth == "bearer" and write.bearer_outcomes \
        else write.outcomes
    for role, expected in zip(ROLES, outcomes, strict=True):
        ids = targets(world, role)
        if auth == "bearer" or role == "anonymous":
            client = Client()
            headers = {} if role == "anonymous" else {
                "Authorization": f"Bearer {ApiToken.issue(world.users[role])[1]}"}
        else:
            client = client_of(world, role, csrf=True)
            client.get("/api/v1/docs")  # sets the csrftoken cookie
            headers = {"X-CSRFToken": client.cookies["csrftoken"].value}
        before = state()
        status = api_call(client, write, ids, headers)
        if expected == OK:
            assert status == write.success, (name, auth, role, status)
            assert state() != before, (name, auth, role, "nothing changed")
        else:
            assert status == (401 if expected == UNAUTHORIZED else 403), (name, auth, role,
                                                                         status)
            assert state() == before, (name, auth, role, "a refusal changed something")
        _reset(world)


def _reset(world: World) -> None:
    """Undo what a write did, so the next role starts from the same world."""
    from quotaweb.models import CapacityLimit, Event, WarmPool, WarmPoolSegment

    Event.objects.all().delete()
    WarmPoolSegment.objects.all().delete()
    WarmPool.objects.all().delete()
    Job.objects.all().delete()
    ApiToken.objects.all().delete()
    QuotaShare.objects.exclude(name__in=world.shares).delete()
    for name, share in world.shares.items():
        QuotaShare.objects.filter(pk=share.pk).update(
            state="ENABLED", deleted_at=None, max_keep_alive_seconds=3600, name=name)
    CapacityLimit.objects.filter(quota_share__name="QS9").delete()
    CapacityUnit.objects.exclude(pk=world.unit.pk).delete()
    CapacityUnit.objects.filter(pk=world.unit.pk).update(max_capacity=4)


# Dashboard forms ------------------------------------------------------------------------


@dataclass(frozen=True)
class Form:
    url: str
    data: Callable[[dict[str, int]], dict[str, Any]]
    outcomes: tuple[str, ...]


def share_form(ids: dict[str, int]) -> dict[str, Any]:
    # The share page's form: every field, with one change (the keep-alive cap).
    return {"sharing_strategy": "LEND_AND_BORROW", "borrow_limit": "100", "state": "ENABLED",
            "max_keep_alive_seconds": "120", "limit_0": "2", "members": []}


def submit_form(ids: dict[str, int]) -> dict[str, Any]:
    return {"name": "from-form", "quota_share": "QS1", "instance_type": UNIT,
            "instance_count": "1", "priority": "0", "duration_seconds": "30",
            "keep_alive_seconds": "0", "retry_attempts": "1", "max_runtime_seconds": "86400",
            "volume_size_gb": "0", "client_token": "form-token"}


def unit_form(prefix: str, *, name: bool) -> Callable[[dict[str, int]], dict[str, Any]]:
    def data(ids: dict[str, int]) -> dict[str, Any]:
        figures = {"max_capacity": "8", "warm_pool_limit": "0", "cold_start_seconds": "60",
                   "warm_start_seconds": "5", **({"name": "ml.new"} if name else {})}
        return {f"{prefix.format(**ids)}-{key}": value for key, value in figures.items()}
    return data


FORMS = {
    "submit": Form("/submit", submit_form, (OK, OK, REFUSED, REFUSED, LOGIN)),
    "job priority": Form("/jobs/{queued}/priority", lambda ids: {"priority": "7"},
                         (*SHARE_WRITE, LOGIN)),
    "job terminate": Form("/jobs/{queued}/terminate", lambda ids: {"reason": "stop"},
                          (*SHARE_WRITE, LOGIN)),
    "job keep-alive": Form("/jobs/{finished}/keep-alive",
                           lambda ids: {"keep_alive_seconds": "90"}, (*SHARE_WRITE, LOGIN)),
    "pool keep-alive": Form("/warm-pools/{pool}/keep-alive",
                            lambda ids: {"keep_alive_seconds": "0"}, (*SHARE_WRITE, LOGIN)),
    "share change": Form("/shares/QS1", share_form, (*ADMIN_ONLY, LOGIN)),
    "capacity add": Form("/capacity/units", unit_form("new", name=True), (*ADMIN_ONLY, LOGIN)),
    "capacity change": Form("/capacity/units/{unit}", unit_form("unit-{unit}", name=False),
                            (*ADMIN_ONLY, LOGIN)),
    "capacity delete": Form("/capacity/units/{spare}/delete", lambda ids: {},
                            (*ADMIN_ONLY, LOGIN)),
}


@pytest.mark.parametrize("name", list(FORMS))
def test_every_form_for_every_role(world: World, name: str) -> None:
    form = FORMS[name]
    for role, expected in zip(ROLES, form.outcomes, strict=True):
        ids = targets(world, role)
        client = client_of(world, role)
        before = state()
        response = client.post(form.url.format(**ids), form.data(ids))
        where = response.get("Location", "")
        if expected == OK:
            assert response.status_code == 302 and "/accounts/login" not in where, (
                name, role, response.status_code, where)
            assert state() != before, (name, role, "nothing changed")
        elif expected == LOGIN:
            assert response.status_code == 302 and where.startswith("/accounts/login/"), (
                name, role, response.status_code, where)
            assert state() == before, (name, role)
        else:
            # 403 for an action on something the user may not change; 422 when the form
            # offers the user no such choice (a share they are not a member of).
            assert response.status_code in (403, 422), (name, role, response.status_code)
            assert state() == before, (name, role, "a refusal changed something")
        _reset(world)


# The admin ------------------------------------------------------------------------------


def admin_urls() -> list[str]:
    urls = [reverse("admin:index")]
    for model in django_admin.site._registry:
        meta = model._meta
        urls.append(reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"))
    return urls


def test_the_admin_is_for_administrators_only(world: World) -> None:
    ids = targets(world, "admin")
    for role in ROLES:
        client = client_of(world, role)
        for url in [*admin_urls(), reverse("admin:quotaweb_quotashare_change",
                                           args=[world.shares["QS1"].pk])]:
            response = client.get(url)
            if role == "admin":
                assert response.status_code == 200, (role, url, response.status_code)
            else:
                assert response.status_code == 302, (role, url, response.status_code)
                assert response["Location"].startswith("/admin/login/"), (role, url)
        # Writes: add a capacity unit, terminate a job with the admin's action.
        before = state()
        added = client.post(reverse("admin:quotaweb_capacityunit_add"), {
            "name": "ml.admin", "max_capacity": "1", "warm_pool_limit": "0",
            "cold_start_seconds": "60", "warm_start_seconds": "5"})
        action = client.post(reverse("admin:quotaweb_job_changelist"), {
            "action": "terminate_selected", "_selected_action": [str(ids["queued"])]})
        if role == "admin":
            assert added.status_code == 302 and action.status_code in (200, 302)
            assert CapacityUnit.objects.filter(name="ml.admin").exists()
            assert Job.objects.get(pk=ids["queued"]).status == "FAILED"
        else:
            assert added.status_code == 302 and added["Location"].startswith("/admin/login/")
            assert action.status_code == 302 and action["Location"].startswith("/admin/login/")
            assert state() == before, (role, "the admin changed something for a non-admin")


# The websocket ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_the_websocket_admits_every_signed_in_user_and_no_one_else(
    world: World, settings: Any
) -> None:
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator
    from django.db import connections

    from quotaweb.asgi import application

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    for role in ROLES:
        headers = [(b"origin", b"http://localhost")]
        if role != "anonymous":
            client = await sync_to_async(client_of)(world, role)
            headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
        socket = WebsocketCommunicator(application, "/ws/events/", headers=headers)
        connected, _ = await socket.connect(timeout=10)
        if role == "anonymous":
            assert not connected, "an anonymous websocket was accepted"
        else:
            assert connected, role
            first = await socket.receive_json_from(timeout=10)
            assert first["type"] == "snapshot", (role, first)
        await socket.disconnect()
    await sync_to_async(connections.close_all)()
