"""Which executor runs a job: one object per kind (`Job.executor`), behind the interface of
quotaweb/executors/base.py.  The cycle, the launchers, the services and the pages ask here,
never a backend by name.

A new backend (docs/architecture.md, Executors): a class with the interface's methods in a
module of this package, an `Executor` choice for its kind in quotaweb/models/jobs.py, and
one entry in `_BUILT_IN` below.  Command jobs go to the kind QUOTAWEB_COMMAND_EXECUTOR
names (default `local`); jobs without a command are simulated.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from ..models import Attempt
from ..models.jobs import Executor as ExecutorKind
from .base import Executor
from .local_backend import LocalExecutor
from .simulated import SimulatedExecutor
from .slurm.backend import SlurmExecutor
from .slurm.backend import runs as slurm_runs

_BUILT_IN: tuple[Executor, ...] = (SimulatedExecutor(), LocalExecutor(), SlurmExecutor())
_executors: dict[str, Executor] = {executor.kind: executor for executor in _BUILT_IN}


def register(executor: Executor) -> None:
    """Add or replace the executor of `executor.kind` (tests, or a plug-in backend)."""
    _executors[executor.kind] = executor


def all_executors() -> list[Executor]:
    return list(_executors.values())


def launched_kinds() -> list[str]:
    """The kinds whose due attempts the launcher hands to `start`."""
    return [kind for kind, executor in _executors.items() if executor.launched]


def executor_for(kind: str) -> Executor:
    try:
        return _executors[kind]
    except KeyError:
        raise ImproperlyConfigured(f"No executor runs jobs of kind {kind!r}.") from None


def command_kind() -> str:
    """The kind a job with a command runs on (QUOTAWEB_COMMAND_EXECUTOR)."""
    return str(settings.QUOTAWEB.get("COMMAND_EXECUTOR") or ExecutorKind.LOCAL.value)


def kind_for(command: str | None, capacity_unit: str | None = None) -> str:
    """The kind a new job runs on: Slurm for a command on a capacity unit the operator
    mapped to Slurm (QUOTAWEB_SLURM_UNITS), else its command's executor, or simulated
    without a command."""
    if not command:
        return ExecutorKind.SIMULATED.value
    if capacity_unit is not None and slurm_runs(capacity_unit):
        return ExecutorKind.SLURM.value
    return command_kind()


def command_executor() -> Executor:
    return executor_for(command_kind())


def start(attempt_id: int) -> bool:
    """Start a due attempt with its job's executor (what every launcher calls)."""
    kind = Attempt.objects.filter(pk=attempt_id).values_list("job__executor", flat=True).first()
    if kind is None:
        return False
    return executor_for(kind).start(attempt_id)


def stop(attempt_ids: list[int]) -> None:
    """Nudge the executors of these just-stopped attempts (after the commit that set their
    outcome and kill_at); each backend also finds them by polling, so a lost nudge only
    delays the stop."""
    now = timezone.now()
    rows = Attempt.objects.filter(pk__in=attempt_ids, outcome__isnull=False).values_list(
        "pk", "job__executor", "kill_at")
    for attempt_id, kind, kill_at in rows:
        grace = (kill_at - now).total_seconds() if kill_at else 0.0
        executor_for(kind).stop(attempt_id, max(grace, 0.0))
