"""Quotaweb's scheduling engine: pure Python, standard library only, no clock reads.

`schedule(snapshot)` decides one cycle; `scheduler.lifecycle` advances attempts and warm
pools; `python -m scheduler.simulate FILE.json` runs a scenario in virtual time.
"""

from .cycle import schedule
from .decisions import (
    CycleResult,
    Dispatch,
    PendingReason,
    PoolTermination,
    Preempt,
    PreemptionKind,
    SetPendingReason,
    TerminateWarmPool,
)
from .errors import InconsistentSnapshot
from .model import (
    CapacityUnit,
    Job,
    JobStatus,
    Policy,
    QuotaShare,
    ShareState,
    Snapshot,
    Strategy,
    WarmPool,
    WarmPoolMatch,
)

__all__ = [
    "CapacityUnit",
    "CycleResult",
    "Dispatch",
    "InconsistentSnapshot",
    "Job",
    "JobStatus",
    "PendingReason",
    "Policy",
    "PoolTermination",
    "Preempt",
    "PreemptionKind",
    "QuotaShare",
    "SetPendingReason",
    "ShareState",
    "Snapshot",
    "Strategy",
    "TerminateWarmPool",
    "WarmPool",
    "WarmPoolMatch",
    "schedule",
]
