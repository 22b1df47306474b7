"""Where instances live: an executor host's declaration (QUOTAWEB_INSTANCES), the registry
of hosted instances in the database, and the placement of an attempt's instance numbers
on hosts and devices (docs/executors.md, Instances).

The engine numbers the instances of a unit 0..C-1 and gives each attempt its numbers; this
module is where those numbers become machines and GPUs.  A declaration lists entries
separated by `;` or white space:

    ml.g5.xlarge=0-3               instances #0-#3, one device each: GPUs 0, 1, 2, 3
    ml.g5.xlarge=4-5@6,7           instances #4 and #5 on GPUs 6 and 7
    ml.p4d.24xlarge=0@0-7          one instance made of GPUs 0-7
    ml.c5.xlarge=0-9@none          ten instances without GPUs
    *                              every instance that no host declares, without GPUs

Without `@`, an entry's instances take the host's next unused GPU indices, one each.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured

EVERYTHING = "*"
UNIT = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
MAX_NUMBER = 1_000_000


@dataclass(frozen=True)
class Declared:
    """One instance that a host declares: unit, number and its device indices."""

    capacity_unit: str
    number: int
    devices: tuple[str, ...]


@dataclass(frozen=True)
class Declaration:
    instances: tuple[Declared, ...]
    hosts_unlisted: bool  # '*': also runs every instance that no host declares


def parse_numbers(text: str, what: str) -> list[int]:
    """`0-3,6` -> [0, 1, 2, 3, 6]; a clear error for anything else."""
    numbers: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if match is None:
            raise ImproperlyConfigured(f"QUOTAWEB_INSTANCES: {what} {text!r} is not a list "
                                       "of numbers and ranges such as 0-3,6.")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if high < low or high > MAX_NUMBER:
            raise ImproperlyConfigured(f"QUOTAWEB_INSTANCES: {what} range {part.strip()!r} "
                                       "is empty or too large.")
        numbers.extend(range(low, high + 1))
    if len(set(numbers)) != len(numbers):
        raise ImproperlyConfigured(f"QUOTAWEB_INSTANCES: {what} {text!r} repeats a number.")
    return numbers


def parse_declaration(text: str) -> Declaration:
    """Read a QUOTAWEB_INSTANCES value (see the module docstring)."""
    instances: list[Declared] = []
    everything = False
    next_device = 0
    used_devices: set[str] = set()
    for entry in re.split(r"[;\s]+", text.strip()):
        if not entry:
            continue
        if entry == EVERYTHING:
            everything = True
            continue
        unit, numbers, devices = _entry(entry)
        if devices is None:
            devices = [str(index) for index in range(next_device, next_device + len(numbers))]
        per_instance, remainder = divmod(len(devices), len(numbers))
        if remainder or (devices and per_instance == 0):
            raise ImproperlyConfigured(
                f"QUOTAWEB_INSTANCES: {entry!r} gives {len(devices)} devices to "
                f"{len(numbers)} instances; give each instance the same number of devices.")
        if used_devices & set(devices):
            raise ImproperlyConfigured(
                f"QUOTAWEB_INSTANCES: {entry!r} uses a device another entry uses.")
        used_devices.update(devices)
        next_device = max([next_device, *(int(d) + 1 for d in devices)])
        for index, number in enumerate(numbers):
            own = tuple(devices[index * per_instance:(index + 1) * per_instance])
            instances.append(Declared(unit, number, own))
    keys = [(item.capacity_unit, item.number) for item in instances]
    if len(set(keys)) != len(keys):
        raise ImproperlyConfigured("QUOTAWEB_INSTANCES declares an instance twice.")
    return Declaration(tuple(instances), everything)


def _entry(entry: str) -> tuple[str, list[int], list[str] | None]:
    unit, equals, rest = entry.partition("=")
    if not equals or not UNIT.match(unit):
        raise ImproperlyConfigured(
            f"QUOTAWEB_INSTANCES: {entry!r} is not UNIT=NUMBERS[@DEVICES] "
            "(for example ml.g5.xlarge=0-3) or '*'.")
    numbers_text, at, devices_text = rest.partition("@")
    numbers = parse_numbers(numbers_text, f"{unit}'s instance numbers")
    if not at:
        return unit, numbers, None
    if devices_text == "none":
        return unit, numbers, []
    return unit, numbers, [str(d) for d in parse_numbers(devices_text, f"{unit}'s devices")]


@dataclass(frozen=True)
class Rank:
    """The part of an attempt that one host runs: its instance numbers and devices."""

    host: str
    instances: tuple[int, ...]
    devices: tuple[str, ...]


@dataclass(frozen=True)
class Placement:
    """Where an attempt's instances are: one rank per host, ordered by lowest instance
    number; `unhosted` lists the numbers no host declares (run by a '*' host, if any)."""

    ranks: tuple[Rank, ...]
    unhosted: tuple[int, ...]

    @property
    def hosts(self) -> list[str]:
        return [rank.host for rank in self.ranks]


def place(numbers: Sequence[int], hosted: dict[int, tuple[str, str]]) -> Placement:
    """Group an attempt's instance numbers by the host that declares each
    (`hosted`: number -> (host, devices as "0,1"))."""
    by_host: dict[str, list[tuple[int, str]]] = {}
    unhosted: list[int] = []
    for number in sorted(numbers):
        if number in hosted:
            host, devices = hosted[number]
            by_host.setdefault(host, []).append((number, devices))
        else:
            unhosted.append(number)
    ranks = [
        Rank(host, tuple(n for n, _ in items),
             tuple(d for _, devices in items for d in devices.split(",") if d))
        for host, items in by_host.items()
    ]
    ranks.sort(key=lambda rank: rank.instances[0])
    return Placement(tuple(ranks), tuple(unhosted))


@dataclass(frozen=True)
class Role:
    """What one host runs of an attempt: rank `index` of the attempt's hosts (rank 0 is
    the host of its lowest instance number, and MASTER_ADDR)."""

    index: int
    rank: Rank
    hosts: tuple[str, ...]
    master_address: str

    @property
    def world_size(self) -> int:
        return len(self.hosts)
