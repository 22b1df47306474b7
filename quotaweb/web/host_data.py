"""Where each capacity unit's instances are, for the capacity and fleet pages: the executor
hosts that declared them (docs/executors.md), whether each is reachable, and the
instances that no host declares (simulated jobs only, unless a '*' host runs them)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from ..executors.registry import is_alive
from ..models import CapacityUnit, ExecutorHost, HostedInstance


def number_ranges(numbers: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> '#0-#2, #5'."""
    runs: list[list[int]] = []
    for number in sorted(numbers):
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ", ".join(f"#{low}" if low == high else f"#{low}-#{high}" for low, high in runs)


def hosts(now: datetime) -> list[dict[str, Any]]:
    """Every registered executor host with its state and what it declared."""
    rows = []
    for host in ExecutorHost.objects.prefetch_related("instances").order_by("name"):
        by_unit: dict[str, list[int]] = {}
        for instance in host.instances.all():
            by_unit.setdefault(instance.capacity_unit, []).append(instance.number)
        rows.append({
            "name": host.name, "address": host.address, "seen_at": host.seen_at,
            "reachable": is_alive(host, now), "isolation_problem": host.isolation_problem,
            "hosts_unlisted": host.hosts_unlisted,
            "instances": [f"{unit} {number_ranges(numbers)}"
                          for unit, numbers in sorted(by_unit.items())],
        })
    return rows


def unit_placements(now: datetime) -> dict[str, list[dict[str, Any]]]:
    """Per capacity unit: which host runs which of its instances, in instance order, and
    the instances no host declares."""
    alive = {host.name: is_alive(host, now) for host in ExecutorHost.objects.all()}
    runs_unlisted = [name for name in ExecutorHost.objects.filter(
        hosts_unlisted=True).values_list("name", flat=True) if alive[name]]
    placed: dict[str, dict[str, list[tuple[int, str]]]] = {}
    for instance in HostedInstance.objects.select_related("host"):
        placed.setdefault(instance.capacity_unit, {}).setdefault(
            instance.host.name, []).append((instance.number, instance.devices))
    result: dict[str, list[dict[str, Any]]] = {}
    for unit in CapacityUnit.objects.order_by("name"):
        groups = placed.get(unit.name, {})
        rows = [{
            "host": name, "reachable": alive.get(name, False),
            "instances": number_ranges(n for n, _ in items),
            "devices": ", ".join(d for _, d in sorted(items) if d),
        } for name, items in sorted(groups.items(), key=lambda kv: min(kv[1]))]
        declared = {n for items in groups.values() for n, _ in items}
        missing = [n for n in range(unit.max_capacity) if n not in declared]
        if missing:
            rows.append({"host": None, "reachable": bool(runs_unlisted),
                         "unlisted_by": ", ".join(runs_unlisted),
                         "instances": number_ranges(missing), "devices": ""})
        result[unit.name] = rows
    return result
