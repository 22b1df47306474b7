"""The capacity page says where each unit's instances are: which executor host declared
them, with which GPUs, which hosts are unreachable, and which instances no host runs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from quotaweb.models import ExecutorHost, HostedInstance, Job, QuotaShare
from quotaweb.web.host_data import number_ranges

from . import test_api_helpers as helpers
from .test_api_helpers import submission

# The helpers' fixtures, made available to this module's tests.
api, world = helpers.api, helpers.world

ClientFor = Callable[[Any], Any]


@pytest.mark.parametrize(("numbers", "shown"), [
    ([], ""), ([3], "#3"), ([2, 0, 1], "#0-#2"), ([0, 1, 2, 5, 7, 8], "#0-#2, #5, #7-#8"),
])
def test_instance_numbers_are_shown_as_ranges(numbers: list[int], shown: str) -> None:
    assert number_ranges(numbers) == shown


def test_the_capacity_page_shows_each_instances_host_and_which_are_unreachable(
    walkthrough_config: Any, admin: Any, client_for: ClientFor,
) -> None:
    unit = walkthrough_config.unit  # 3 instances
    now = timezone.now()
    alive = ExecutorHost.objects.create(name="gpu-a", address="10.0.0.7", started_at=now,
                                        seen_at=now)
    gone = ExecutorHost.objects.create(name="gpu-b", started_at=now - timedelta(hours=1),
                                       seen_at=now - timedelta(hours=1))
    HostedInstance.objects.create(host=alive, capacity_unit=unit.name, number=0, devices="0")
    HostedInstance.objects.create(host=gone, capacity_unit=unit.name, number=1, devices="3")
    html = client_for(admin).get("/capacity").content.decode()
    text = " ".join(html.split())
    assert "#0 on <strong>gpu-a</strong> (GPUs 0)" in text
    assert "#1 on <strong>gpu-b</strong> (GPUs 3): unreachable" in text
    assert "#2 on no host: simulated jobs only" in text
    assert "Executor hosts" in html and "10.0.0.7" in html
    assert f"{unit.name} #1" in text and "unreachable" in text


def test_a_command_jobs_page_shows_the_log_limit(
    walkthrough_config: Any, member: Any, client_for: ClientFor, settings: Any,
) -> None:
    settings.QUOTAWEB = {**settings.QUOTAWEB, "LOG_LIMIT_BYTES": 5 * 1024 * 1024}
    job = Job.objects.create(name="cmd", quota_share=QuotaShare.objects.get(name="QS1"),
                             instance_type=walkthrough_config.unit.name, executor="local",
                             command="true")
    text = " ".join(client_for(member).get(f"/jobs/{job.pk}").content.decode().split())
    assert "Output is kept up to 5.0 MB or 1,000,000 lines per attempt" in text


def test_the_fleet_page_shows_every_signed_in_user_where_the_instances_are(
    walkthrough_config: Any, member: Any, client_for: ClientFor,
) -> None:
    unit = walkthrough_config.unit
    long_ago = timezone.now() - timedelta(hours=1)
    gone = ExecutorHost.objects.create(name="gpu-b", started_at=long_ago, seen_at=long_ago)
    HostedInstance.objects.create(host=gone, capacity_unit=unit.name, number=2, devices="1")
    text = " ".join(client_for(member).get("/fleet").content.decode().split())
    assert "#2 on <strong>gpu-b</strong> (GPUs 1): unreachable" in text
    assert "#0-#1 on no host: simulated jobs only" in text


def test_instances_no_host_declares_are_shown_on_the_host_that_takes_them(
    walkthrough_config: Any, admin: Any, client_for: ClientFor,
) -> None:
    now = timezone.now()
    ExecutorHost.objects.create(name="embedded", hosts_unlisted=True, started_at=now,
                                seen_at=now)
    text = " ".join(client_for(admin).get("/capacity").content.decode().split())
    assert "#0-#2 on <strong>embedded</strong> (declared by no host" in text


def test_the_api_refuses_a_command_job_where_commands_cannot_be_isolated(
    api: Callable[[str], Any], settings: Any,
) -> None:
    settings.QUOTAWEB = {**settings.QUOTAWEB, "JOB_USER": "no-such-user-here",
                         "LOCAL_EXECUTOR": True}
    status, body = api("member").post("/api/v1/jobs", submission(
        duration_seconds=None, command="cat /etc/passwd"))
    assert status == 409, body
    assert body["error"]["code"] == "COMMAND_JOBS_DISABLED"
    assert "bubblewrap" in body["error"]["message"]
    assert not Job.objects.exists()
    # Simulated jobs still run.
    assert api("member").post("/api/v1/jobs", submission())[0] == 201
