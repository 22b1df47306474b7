"""Logging helpers named in settings.LOGGING."""

from __future__ import annotations

import logging


class RefusalsOnOneLine(logging.Filter):
    """A refused request (a 4xx) is the client's doing, not a bug in the server: it is
    logged as its one line, without the traceback Django attaches when a view raises
    PermissionDenied or SuspiciousOperation."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and status < 500:
            record.exc_info = None
            record.exc_text = None
        return True
