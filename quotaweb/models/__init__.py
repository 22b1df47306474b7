"""Quotaweb's stored state: capacity, quota shares, jobs and their attempts, warm pools,
the event outbox, usage samples and the scheduler's own bookkeeping."""

from .capacity import CapacityUnit
from .events import Event
from .hosts import ExecutorHost, HostedInstance
from .jobs import Attempt, AttemptRank, Job, LogChunk
from .scheduler_state import CycleRecord, CycleTotals, SchedulerState
from .shares import CapacityLimit, QuotaShare
from .tokens import ApiToken
from .usage import UsageSample
from .warm_pools import WarmPool, WarmPoolSegment

__all__ = [
    "ApiToken",
    "Attempt",
    "AttemptRank",
    "CapacityLimit",
    "CapacityUnit",
    "CycleRecord",
    "CycleTotals",
    "Event",
    "ExecutorHost",
    "HostedInstance",
    "Job",
    "LogChunk",
    "QuotaShare",
    "SchedulerState",
    "UsageSample",
    "WarmPool",
    "WarmPoolSegment",
]
