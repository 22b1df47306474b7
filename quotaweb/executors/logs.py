"""A running command's log: the supervisor follows the file the command writes and ships
its complete lines to the database in chunks (LogChunk rows, many lines each), so that any
web process can serve them (docs/executors.md, Logs).

A chatty job must not hold the database against the cycle, so each poll reads at most
READ_BYTES of the file and stores what it read in one short write of a few rows of at most
CHUNK_BYTES each.  A log is capped by what it stores, row overhead included
(LOG_LIMIT_BYTES), and by its lines (LOG_LIMIT_LINES): past either, one line says so, its
row is marked `capped`, the rest is dropped and the file is kept from growing."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db.models import Count, F, Max, Sum
from django.db.models.functions import Length
from django.utils import timezone

from ..models import LogChunk

LOG_LIMIT_NOTICE = ("[quotaweb] The log limit of {limit:,} bytes per attempt is reached: "
                    "the rest of this attempt's output is not kept.")
LINE_LIMIT_NOTICE = ("[quotaweb] The log limit of {limit:,} lines per attempt is reached: "
                     "the rest of this attempt's output is not kept.")
MAX_LINE_BYTES = 16_384  # a longer line is shipped in pieces
RANK_LINE_NUMBERS = 100_000_000  # a rank's lines are numbered from rank × this
READ_BYTES = 1 << 20  # read at most this much of a log per poll, so one chatty job cannot stall
CHUNK_BYTES = 64 * 1024  # the text of one LogChunk row, at most (a longer line aside)
# What a row costs beyond its text (row header, key, line numbers, time, index entries):
# counted against LOG_LIMIT_BYTES, so that many small rows cannot pass the limit.
ROW_BYTES = 128

# Anchored at line starts, so that each line is scanned once.
_LONG_LINE = re.compile(rb"(?:^|\n)[^\n]{%d}" % (MAX_LINE_BYTES + 1))
_CR_BEFORE_NEWLINE = re.compile(r"\r+\n")


@dataclass
class Chunk:
    """Lines read but not yet stored (kept when a write fails, and written again)."""

    first: int
    count: int
    text: str  # the lines joined by newlines
    capped: bool = False


class LogTail:
    """Follows a log file that a process writes, turning complete lines into LogChunk rows."""

    def __init__(self, path: Path, limit: int | None = None, rank: int = 0,
                 line_limit: int | None = None) -> None:
        self.path = path
        # Ranks of a multi-host attempt share its log: each numbers its lines in a range
        # of its own and names itself on each, so that rank 0's come first, then rank 1's.
        self.prefix = f"[rank {rank}] " if rank else ""
        self.limit = limit if limit is not None else settings.QUOTAWEB["LOG_LIMIT_BYTES"]
        self.line_limit = (line_limit if line_limit is not None
                           else settings.QUOTAWEB["LOG_LIMIT_LINES"])
        self.capped = False  # a limit was reached: what the file gains is dropped
        self.offset = 0
        self.partial = b""
        self.pending: list[Chunk] = []
        self.numbered = rank * RANK_LINE_NUMBERS  # the number of the last line read
        self.stored_through = self.numbered  # lines up to this one are stored already
        self.stored_bytes = 0  # counted against `limit`, rows included
        self.stored_lines = 0

    def read(self, *, final: bool = False) -> bool:
        """Move what the file gained into `pending`; False when it had nothing new."""
        if self.capped:
            self._drop()
            return False
        try:
            with self.path.open("rb") as file:
                file.seek(self.offset)
                data = file.read(min(READ_BYTES, self.limit - self.offset))
                over = len(data) == self.limit - self.offset and bool(file.read(1))
        except FileNotFoundError:
            data, over = b"", False
        self.offset += len(data)
        before = len(self.pending)
        self._take(self._complete_lines(data, final=final and not data))
        if over and not self.capped:
            self._cap(LOG_LIMIT_NOTICE.format(limit=self.limit))
        return bool(data) or len(self.pending) > before

    def _complete_lines(self, data: bytes, *, final: bool) -> bytes:
        """The complete lines among what was left and what was read, each ending with a
        newline; keeps the rest for the next read (all of it, at the end)."""
        data = self.partial + data
        end = len(data) if final else data.rfind(b"\n") + 1
        complete, self.partial = data[:end], data[end:]
        while len(self.partial) >= MAX_LINE_BYTES:
            complete += self.partial[:MAX_LINE_BYTES] + b"\n"
            self.partial = self.partial[MAX_LINE_BYTES:]
        if complete and not complete.endswith(b"\n"):
            complete += b"\n"
        if _LONG_LINE.search(complete):
            complete = b"".join(_pieces(line) for line in complete.split(b"\n")[:-1])
        return complete

    def _take(self, complete: bytes) -> None:
        """Cut the lines into chunks, as many as the limits allow."""
        blob = self._stored_form(complete)
        start = 0
        while start < len(blob) and not self.capped:
            end = _chunk_end(blob, start)
            piece = self._unstored(blob[start:end])
            start = end
            if not piece:
                continue
            fits = self._fitting(piece)
            if fits:
                self._pend(piece[:fits])
            if fits < len(piece):
                self._cap(self._notice())

    def _unstored(self, piece: bytes) -> bytes:
        """The lines of `piece` that are not stored yet (see `resume`)."""
        skip = self.stored_through - self.numbered
        if skip <= 0:
            return piece
        parts = piece.split(b"\n", skip)
        if len(parts) <= skip or (len(parts) == skip + 1 and not parts[-1]):
            self.numbered += piece.count(b"\n")
            return b""
        self.numbered += skip
        return piece[len(piece) - len(parts[-1]):]

    def resume(self, attempt_id: int) -> None:
        """Follow a log that another process began storing, from the file's start: the
        lines it stored are skipped (chunks need not fall where its chunks fell) and count
        against the limits."""
        base = self.numbered
        stored = LogChunk.objects.filter(attempt_id=attempt_id, first__gt=base,
                                         first__lte=base + RANK_LINE_NUMBERS)
        found = stored.aggregate(last=Max(F("first") + F("count") - 1), lines=Sum("count"),
                                 text=Sum(Length("text")), rows=Count("pk"))
        if not found["rows"]:
            return
        self.stored_through = found["last"]
        self.stored_lines = found["lines"]
        self.stored_bytes = found["text"] + found["lines"] + found["rows"] * ROW_BYTES
        self.capped = stored.filter(capped=True).exists()

    def _stored_form(self, complete: bytes) -> bytes:
        # PostgreSQL text cannot hold NUL; \r of CRLF output is noise in a log view.
        text = complete.decode("utf-8", errors="replace").replace("\x00", "\ufffd")
        text = _CR_BEFORE_NEWLINE.sub("\n", text)
        if self.prefix and text:
            text = self.prefix + text[:-1].replace("\n", "\n" + self.prefix) + "\n"
        return text.encode()

    def _fitting(self, piece: bytes) -> int:
        """How many bytes of `piece` (whole lines) fit under both limits."""
        lines_left = self.line_limit - self.stored_lines
        bytes_left = self.limit - self.stored_bytes - ROW_BYTES
        if piece.count(b"\n") <= lines_left and len(piece) <= bytes_left:
            return len(piece)
        if lines_left <= 0 or bytes_left <= 0:
            return 0
        by_bytes = piece.rfind(b"\n", 0, bytes_left) + 1
        after = piece.split(b"\n", lines_left)  # the last part follows the allowed lines
        by_lines = len(piece) - len(after[-1]) if len(after) > lines_left else len(piece)
        return min(by_bytes, by_lines)

    def _pend(self, piece: bytes, *, capped: bool = False) -> None:
        count = piece.count(b"\n")
        self.pending.append(Chunk(self.numbered + 1, count, piece[:-1].decode(), capped))
        self.numbered += count
        self.stored_lines += count
        self.stored_bytes += len(piece) + ROW_BYTES

    def _notice(self) -> str:
        if self.stored_lines >= self.line_limit:
            return LINE_LIMIT_NOTICE.format(limit=self.line_limit)
        return LOG_LIMIT_NOTICE.format(limit=self.limit)

    def _cap(self, notice: str) -> None:
        """A limit is reached: say so in the log, in a row marked capped, and from now on
        drop what the command writes."""
        self._pend(f"{self.prefix}{notice}\n".encode(), capped=True)
        self.capped = True
        self.partial = b""
        self._drop()

    def _drop(self) -> None:
        # The command writes in append mode, so after this its output starts again at the
        # file's beginning: the disk holds at most what it writes between two polls.
        with contextlib.suppress(OSError):
            os.truncate(self.path, 0)

    def ship(self, attempt_id: int) -> int:
        """Store the pending chunks in one short write; returns their lines.
        ignore_conflicts makes a retry after a failure that happened past the commit
        harmless (the numbers are the same)."""
        if not self.pending:
            return 0
        now = timezone.now()
        LogChunk.objects.bulk_create([
            LogChunk(attempt_id=attempt_id, first=chunk.first, count=chunk.count, time=now,
                     text=chunk.text, capped=chunk.capped)
            for chunk in self.pending
        ], ignore_conflicts=True)
        count = sum(chunk.count for chunk in self.pending)
        self.pending = []
        return count


def _pieces(line: bytes) -> bytes:
    """A line, in pieces of at most MAX_LINE_BYTES, each ending with a newline."""
    return b"".join(line[at:at + MAX_LINE_BYTES] + b"\n"
                    for at in range(0, max(len(line), 1), MAX_LINE_BYTES))


def _chunk_end(blob: bytes, start: int) -> int:
    """Where the chunk that begins at `start` ends: after the last whole line within
    CHUNK_BYTES (or after its first line, when that one alone is longer)."""
    if len(blob) - start <= CHUNK_BYTES:
        return len(blob)
    end = blob.rfind(b"\n", start, start + CHUNK_BYTES) + 1
    return end if end > start else blob.index(b"\n", start) + 1
