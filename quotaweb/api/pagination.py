"""Opaque cursors for newest-first listings: a cursor encodes the last id a page showed,
and the next page is everything older.  Ids are never reused, so a page never repeats or
skips a row however many rows are added meanwhile."""

from __future__ import annotations

import base64
import binascii
import json

from .errors import ApiError
from .schemas.common import MAX_ID


def encode_cursor(last_id: int) -> str:
    raw = json.dumps({"before": last_id}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The id a page must stay below; a cursor this API did not make is a 422."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        before = data["before"]
    except (ValueError, TypeError, KeyError, binascii.Error, UnicodeError):
        before = None
    if not isinstance(before, int) or isinstance(before, bool) or not 1 <= before <= MAX_ID:
        raise ApiError(422, "VALIDATION_ERROR", "The cursor is not one this API returned.",
                       {"cursor": ["Pass next_cursor from the previous page unchanged."]})
    return before
