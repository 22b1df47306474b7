"""Ends a user's live-feed sockets when the user signs out (that session's sockets) or is
deactivated (all of them), through the user's channel-layer group (consumers.user_group),
so it works across web processes with Redis."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_save

from .consumers import user_group

log = logging.getLogger(__name__)


def end_sockets(user_id: int, session_key: str | None, reason: str) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(user_group(user_id), {
            "type": "quotaweb.session_ended", "session_key": session_key, "reason": reason})
    except Exception as error:  # noqa: BLE001 - a channel layer down must not fail sign-out
        log.warning("could not end the websockets of user %s: %s", user_id, error)


def on_signed_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    if user is None:
        return
    key = getattr(getattr(request, "session", None), "session_key", None)
    end_sockets(user.pk, key, "Signed out.")


def on_user_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    if not created and not instance.is_active:
        user_id = instance.pk
        transaction.on_commit(lambda: end_sockets(user_id, None, "This user was deactivated."))


def connect() -> None:
    user_logged_out.connect(on_signed_out, dispatch_uid="quotaweb.realtime.signed_out")
    post_save.connect(on_user_saved, sender=get_user_model(),
                      dispatch_uid="quotaweb.realtime.user_saved")
