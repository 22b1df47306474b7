"""JSON over HTTP with the standard library (urllib), and the retry policy.

A call is retried, with exponential backoff and jitter, when the request never reached
the server (connection refused), and, for calls that are safe to repeat (reads, PUT,
PATCH with absolute values, a submission carrying a client_token), also when the
connection broke, timed out, or a proxy answered 502, 503 or 504: the server may or may
not have acted, and repeating the same request leaves the same state.
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from http.client import HTTPException
from typing import Any

from .errors import QuotawebError

API_PREFIX = "/api/v1"
USER_AGENT = "quotaweb-client/1"
RETRY_STATUSES = frozenset({502, 503, 504})
Query = Mapping[str, Any]


def base_url(url: str) -> str:
    """The server's root from what a person types: `http://host:8000`, with or without a
    trailing slash or /api/v1."""
    url = url.strip().rstrip("/")
    if not url:
        raise ValueError("the server URL is empty (set QUOTAWEB_URL or pass --url)")
    if "://" not in url:
        url = f"http://{url}"
    if url.endswith(API_PREFIX):
        url = url[: -len(API_PREFIX)]
    return url


def encode_query(params: Query | None) -> str:
    """`?a=1&status=RUNNING&status=RUNNABLE`: None values are left out, lists repeat."""
    pairs: list[tuple[str, str]] = []
    for key, value in (params or {}).items():
        if value is None:
            continue
        values = value if isinstance(value, list | tuple | set | frozenset) else [value]
        for item in values:
            text = ("true" if item else "false") if isinstance(item, bool) else str(item)
            pairs.append((key, text))
    return f"?{urllib.parse.urlencode(pairs)}" if pairs else ""


class Transport:
    """Sends one API call, retrying as the module docstring says."""

    def __init__(self, url: str, token: str | None, *, timeout: float = 30.0,
                 retries: int = 4, backoff: float = 0.5, max_backoff: float = 8.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.url = base_url(url)
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.sleep = sleep

    def call(self, method: str, path: str, *, params: Query | None = None,
             body: Any = None, retry: bool = False) -> Any:
        """The parsed JSON answer (None for 204), or QuotawebError."""
        request = self._request(method, path, params, body)
        attempt = 0
        while True:
            try:
                return self._send(request)
            except _Retryable as failure:
                if attempt >= self.retries or not (retry or failure.unsent):
                    raise failure.error from None
                wait = failure.retry_after
                if wait is None:
                    wait = min(self.max_backoff, self.backoff * 2 ** attempt)
                    wait *= random.uniform(0.5, 1.0)  # jitter: retries of many clients spread
                self.sleep(wait)
                attempt += 1

    def _request(self, method: str, path: str, params: Query | None,
                 body: Any) -> urllib.request.Request:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        url = f"{self.url}{API_PREFIX}{path}{encode_query(params)}"
        return urllib.request.Request(url, data=data, headers=headers, method=method)

    def _send(self, request: urllib.request.Request) -> Any:
        where = f"{request.get_method()} {request.full_url}"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as answer:
            raise _from_http_error(answer, where) from None
        except urllib.error.URLError as failure:
            reason = failure.reason
            # Refused, or no route or name: the request was not sent.  A timeout or a reset
            # while sending may come after the server read it all.
            unsent = isinstance(reason, OSError) and not isinstance(
                reason, TimeoutError | ConnectionResetError)
            raise _Retryable(_unreachable(where, reason), unsent=unsent) from None
        except (OSError, HTTPException) as failure:  # reset, timeout, truncated answer
            raise _Retryable(_unreachable(where, failure), unsent=False) from None
        if status == 204 or not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise QuotawebError(status, "BAD_RESPONSE",
                                f"{where} answered {status} with a body that is not JSON."
                                ) from None


class _Retryable(Exception):
    """A failure that a retry may cure; `error` is what the caller gets if none does."""

    def __init__(self, error: QuotawebError, *, unsent: bool,
                 retry_after: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.unsent = unsent  # the request never reached the server: always safe to repeat
        self.retry_after = retry_after


def _unreachable(where: str, reason: object) -> QuotawebError:
    return QuotawebError(None, "CONNECTION_ERROR", f"Could not reach {where}: {reason}.")


def _from_http_error(answer: urllib.error.HTTPError, where: str) -> Exception:
    try:
        raw = answer.read()
    except (OSError, HTTPException):
        raw = b""
    finally:
        answer.close()
    error = _error_of(answer.code, raw, where, answer.reason)
    if answer.code in RETRY_STATUSES:
        return _Retryable(error, unsent=False, retry_after=_retry_after(answer.headers))
    return error


def _error_of(status: int, raw: bytes, where: str, reason: object) -> QuotawebError:
    """docs/api.md's error format; anything else (a proxy's HTML page) as HTTP_<status>."""
    try:
        detail = json.loads(raw)["error"]
        return QuotawebError(status, str(detail["code"]), str(detail["message"]),
                             detail.get("fields") or {})
    except (ValueError, KeyError, TypeError):
        return QuotawebError(status, f"HTTP_{status}", f"{where} answered {status} {reason}.")


def _retry_after(headers: Any) -> float | None:
    """Seconds from a Retry-After header (an email.message.Message), when plausible."""
    value = headers.get("Retry-After") if headers is not None else None
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return None if seconds is None or seconds < 0 or seconds > 60 else seconds
