"""A running command's log: the supervisor follows the file the command writes and ships
its complete lines to LogLine rows, so that any web process can serve them; past the log
limit the rest is dropped, and the file is kept from growing (docs/executors.md)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from ..models import LogLine

LOG_LIMIT_NOTICE = ("[quotaweb] The log limit of {limit:,} bytes per attempt is reached: "
                    "the rest of this attempt's output is not kept.")
MAX_LINE_BYTES = 16_384  # a longer line is shipped in pieces
RANK_LINE_NUMBERS = 100_000_000  # a rank's lines are numbered from rank × this
READ_BYTES = 1 << 20  # read at most this much of a log per poll, so one chatty job cannot stall


class LogTail:
    """Follows a log file that a process writes, turning complete lines into LogLine rows."""

    def __init__(self, path: Path, limit: int | None = None, rank: int = 0) -> None:
        self.path = path
        # Ranks of a multi-host attempt share its log: each numbers its lines in a range
        # of its own and names itself on each, so that rank 0's come first, then rank 1's.
        self.prefix = f"[rank {rank}] " if rank else ""
        self.limit = limit if limit is not None else settings.QUOTAWEB["LOG_LIMIT_BYTES"]
        self.capped = False  # the limit was reached: what the file gains is dropped
        self.offset = 0
        self.partial = b""
        self.pending: list[str] = []  # read but not yet stored (kept when a write fails)
        self.shipped = rank * RANK_LINE_NUMBERS  # the number of the last stored line

    def read(self, *, final: bool = False) -> bool:
        """Move what the file gained into `pending`; False when it had nothing new."""
        if self.capped:
            self._drop()
            return False
        try:
            with self.path.open("rb") as file:
                file.seek(self.offset)
                chunk = file.read(min(READ_BYTES, self.limit - self.offset))
                over = len(chunk) == self.limit - self.offset and bool(file.read(1))
        except FileNotFoundError:
            chunk, over = b"", False
        self.offset += len(chunk)
        if over:
            return self._cap(chunk)
        pieces = (self.partial + chunk).split(b"\n")
        self.partial = pieces.pop()
        while len(self.partial) >= MAX_LINE_BYTES:
            pieces.append(self.partial[:MAX_LINE_BYTES])
            self.partial = self.partial[MAX_LINE_BYTES:]
        if final and not chunk and self.partial:
            pieces.append(self.partial)
            self.partial = b""
        self.pending.extend(_text(piece) for piece in pieces)
        return bool(chunk) or bool(pieces)

    def _cap(self, chunk: bytes) -> bool:
        """The limit is reached: keep what came before it, say so in the log, and from now
        on drop what the command writes."""
        pieces = (self.partial + chunk).split(b"\n")
        self.partial = b""
        self.pending.extend(_text(piece) for piece in pieces if piece)
        self.pending.append(LOG_LIMIT_NOTICE.format(limit=self.limit))
        self.capped = True
        self._drop()
        return True

    def _drop(self) -> None:
        # The command writes in append mode, so after this its output starts again at the
        # file's beginning: the disk holds at most what it writes between two polls.
        with contextlib.suppress(OSError):
            os.truncate(self.path, 0)

    def ship(self, attempt_id: int) -> int:
        """Store the pending lines; ignore_conflicts makes a retry after a failure that
        happened past the commit harmless (the numbers are the same)."""
        if not self.pending:
            return 0
        now = timezone.now()
        LogLine.objects.bulk_create([
            LogLine(attempt_id=attempt_id, number=self.shipped + index, time=now,
                    text=self.prefix + text)
            for index, text in enumerate(self.pending, start=1)
        ], ignore_conflicts=True)
        count = len(self.pending)
        self.shipped += count
        self.pending = []
        return count


def _text(line: bytes) -> str:
    # PostgreSQL text cannot hold NUL; \r of CRLF output is noise in a log view.
    return line.decode("utf-8", errors="replace").rstrip("\r").replace("\x00", "\ufffd")
