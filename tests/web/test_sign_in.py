"""Sign-in throttling (issue 11, item 4; issue 25, item 5; django-axes): after
AXES_FAILURE_LIMIT failed sign-ins for one username from one address, sign-in for that
username from that address is refused with a clear 429 page, even with the right password,
until the window (QUOTAWEB_SIGN_IN_WINDOW_SECONDS) has passed; a success resets the count.
The user still signs in from any other address: a stranger cannot lock them out."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db.models import F
from django.test import Client

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]


def sign_in(username: str, password: str, address: str = "10.0.0.1") -> Any:
    client = Client(REMOTE_ADDR=address)
    response = client.post("/accounts/login/", {"username": username, "password": password})
    response.signed_in = "_auth_user_id" in client.session
    return response


def test_the_right_password_after_many_wrong_ones_is_refused_with_a_clear_message(
        admin: Any, settings: Any) -> None:
    for number in range(settings.AXES_FAILURE_LIMIT):
        failed = sign_in("admin", "wrong", address="10.0.1.1")
        assert not failed.signed_in
        # The form again, until the failure that reaches the limit pauses sign-in.
        last = number == settings.AXES_FAILURE_LIMIT - 1
        assert failed.status_code == (429 if last else 200)
    refused = sign_in("admin", "password", address="10.0.1.1")
    assert refused.status_code == 429 and not refused.signed_in
    text = refused.content.decode()
    assert "Too many failed sign-ins" in text and "admin" in text
    assert f"after {settings.AXES_FAILURE_LIMIT} failed attempts" in text
    assert "Try again in" in text


def test_a_stranger_cannot_lock_a_user_out_from_everywhere(
        member: Any, other: Any, settings: Any) -> None:
    """Five wrong passwords for member from one address pause member there only: member
    signs in from another address, and another user from the stranger's address."""
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in("member", "wrong", address="10.0.3.1")
    assert sign_in("member", "password", address="10.0.3.1").status_code == 429
    elsewhere = sign_in("member", "password", address="10.0.3.2")
    assert elsewhere.status_code == 302 and elsewhere.signed_in
    assert sign_in("other", "password", address="10.0.3.1").signed_in
    # Failures spread over many addresses pause none of them.
    for number in range(settings.AXES_FAILURE_LIMIT):
        sign_in("other", "wrong", address=f"10.0.4.{number}")
    assert sign_in("other", "password", address="10.0.4.0").signed_in


def test_a_success_before_the_limit_resets_the_count(member: Any, settings: Any) -> None:
    for _ in range(2):
        for _ in range(settings.AXES_FAILURE_LIMIT - 1):
            sign_in("member", "wrong")
        assert sign_in("member", "password").signed_in


def test_after_the_window_the_right_password_signs_in_again(member: Any,
                                                           settings: Any) -> None:
    from axes.models import AccessAttempt

    settings.AXES_COOLOFF_TIME = timedelta(seconds=600)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in("member", "wrong")
    assert sign_in("member", "password").status_code == 429
    # Nearly 10 minutes later: still paused; past them, the window has passed.
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(seconds=570))
    assert sign_in("member", "password").status_code == 429
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(seconds=60))
    assert sign_in("member", "password").signed_in


def test_the_limit_and_the_window_come_from_the_environment(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items()
           if key not in ("REDIS_URL",) and not key.startswith("QUOTAWEB_")}
    env.update(DJANGO_SETTINGS_MODULE="quotaweb.settings", QUOTAWEB_DATA_DIR=str(tmp_path),
               QUOTAWEB_SIGN_IN_FAILURE_LIMIT="7", QUOTAWEB_SIGN_IN_WINDOW_SECONDS="60",
               QUOTAWEB_SIGN_IN_LOCK_BY="username+address, address")
    code = ("import django; django.setup(); from django.conf import settings as s; "
            "print(s.AXES_FAILURE_LIMIT, int(s.AXES_COOLOFF_TIME.total_seconds()), "
            "s.AXES_LOCKOUT_PARAMETERS)")
    shown = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=60)
    assert shown.stdout.split("\n")[0] == "7 60 [['username', 'ip_address'], 'ip_address']", \
        shown.stderr
    env["QUOTAWEB_SIGN_IN_LOCK_BY"] = "username+password"
    refused = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "QUOTAWEB_SIGN_IN_LOCK_BY must be" in refused.stderr


def test_behind_a_proxy_failures_count_per_forwarded_address(member: Any,
                                                             settings: Any) -> None:
    """With QUOTAWEB_PROXY_COUNT=1 the proxy's own address (shared by everyone) does not
    pause everyone; the address it forwards does, and a forged entry before it is ignored."""
    settings.QUOTAWEB = {**settings.QUOTAWEB, "PROXY_COUNT": 1}

    def via_proxy(username: str, password: str, forwarded: str) -> Any:
        client = Client(REMOTE_ADDR="10.9.9.9", HTTP_X_FORWARDED_FOR=forwarded)
        return client.post("/accounts/login/", {"username": username, "password": password})

    for number in range(settings.AXES_FAILURE_LIMIT):
        via_proxy("member", "wrong", f"203.0.113.{number}, 198.51.100.7")
    assert via_proxy("member", "password", "198.51.100.7").status_code == 429
    assert via_proxy("member", "password", "198.51.100.8").status_code == 302
