"""The registry of executor hosts in the database: a worker registers the instances it
declares as it starts and heartbeats its host while it lives; the launcher and the pages
read where each attempt's instances are (docs/executors.md, Instances)."""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from ..models import Attempt, ExecutorHost, HostedInstance
from .instances import Declaration, Placement, parse_declaration, place
from .routing import this_machine

log = logging.getLogger(__name__)


def lease() -> timedelta:
    return timedelta(seconds=settings.QUOTAWEB["HEARTBEAT_LEASE_SECONDS"])


def machine() -> str:
    """This process's executor host name (its machine)."""
    return this_machine(settings.QUOTAWEB.get("HOST_NAME"))


def declaration() -> Declaration:
    return parse_declaration(str(settings.QUOTAWEB.get("INSTANCES") or ""))


def address() -> str:
    configured = settings.QUOTAWEB.get("HOST_ADDRESS")
    if configured:
        return str(configured)
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return socket.gethostname()


def register_host(now: datetime, isolation_problem: str | None) -> ExecutorHost:
    """Record this host and the instances it declares, replacing what it declared before.
    An instance that another live host declares stays that host's (logged); one whose host
    stopped heartbeating moves here."""
    declared = declaration()
    name = machine()
    with transaction.atomic():
        host, _ = ExecutorHost.objects.update_or_create(name=name, defaults={
            "address": address(), "declared": str(settings.QUOTAWEB.get("INSTANCES") or ""),
            "hosts_unlisted": declared.hosts_unlisted, "seen_at": now, "started_at": now,
            "isolation_problem": isolation_problem or "",
        })
        HostedInstance.objects.filter(host=host).delete()
        taken = _taken_by_live_hosts(declared, name, now)
        rows = []
        for item in declared.instances:
            key = (item.capacity_unit, item.number)
            if key in taken:
                log.error("instance #%s of %s is declared by live host %s too; it stays "
                          "there", item.number, item.capacity_unit, taken[key])
                continue
            rows.append(HostedInstance(host=host, capacity_unit=item.capacity_unit,
                                       number=item.number, devices=",".join(item.devices)))
        if rows:
            # Rows of hosts whose lease ran out: this host takes their instances over.
            HostedInstance.objects.filter(Q(*[
                Q(capacity_unit=row.capacity_unit, number=row.number) for row in rows
            ], _connector=Q.OR)).delete()
            HostedInstance.objects.bulk_create(rows)
    log.info("executor host %s registered %d instances%s", name, len(rows),
             " and every unlisted one" if declared.hosts_unlisted else "")
    return host


def _taken_by_live_hosts(declared: Declaration, name: str,
                         now: datetime) -> dict[tuple[str, int], str]:
    units = {item.capacity_unit for item in declared.instances}
    rows = HostedInstance.objects.filter(
        capacity_unit__in=units, host__seen_at__gte=now - lease()
    ).exclude(host__name=name).values_list("capacity_unit", "number", "host__name")
    return {(unit, number): host for unit, number, host in rows}


def address_of(host: str) -> str:
    """Where other hosts reach `host` (its registered address, else its name)."""
    found = ExecutorHost.objects.filter(name=host).values_list("address", flat=True).first()
    return found or host


def heartbeat_host(now: datetime) -> None:
    ExecutorHost.objects.filter(name=machine()).update(seen_at=now)


def placement(capacity_unit: str, numbers: Sequence[int]) -> Placement:
    """Which hosts run these instances of a unit."""
    hosted = {
        number: (host, devices) for number, host, devices in HostedInstance.objects.filter(
            capacity_unit=capacity_unit, number__in=list(numbers)
        ).values_list("number", "host__name", "devices")
    }
    return place(numbers, hosted)


def placement_of(attempt: Attempt) -> Placement:
    return placement(attempt.job.instance_type, [int(n) for n in attempt.instances or []])


def unlisted_hosts(now: datetime) -> list[str]:
    """The live hosts that run instances no host declares."""
    return list(ExecutorHost.objects.filter(
        hosts_unlisted=True, seen_at__gte=now - lease()
    ).values_list("name", flat=True))


def is_alive(host: ExecutorHost, now: datetime) -> bool:
    return host.seen_at >= now - lease()


def why_unclaimed(attempt: Attempt, now: datetime) -> str:
    """A sentence on why no executor started an attempt, for its status reason."""
    unit = attempt.job.instance_type
    where = placement(unit, [int(n) for n in attempt.instances or []])
    numbers = ", ".join(f"#{n}" for n in sorted(attempt.instances or []))
    if not where.ranks:
        if unlisted_hosts(now):
            return f"no executor took instances {numbers} of {unit}."
        return f"no executor host declares instances {numbers} of {unit}."
    hosts = {host.name: host for host in ExecutorHost.objects.filter(name__in=where.hosts)}
    for name in where.hosts:
        host = hosts.get(name)
        if host is None or not is_alive(host, now):
            return f"its host {name} is unreachable (no heartbeat within the lease)."
        if host.isolation_problem:
            return f"its host {name} cannot isolate commands."
    return f"its host {', '.join(where.hosts)} did not start it."
