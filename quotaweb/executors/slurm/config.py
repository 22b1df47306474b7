"""The operator's map from Quotaweb's capacity to a Slurm cluster (docs/executors.md, Slurm).

Two settings, both off (empty) by default:

- QUOTAWEB_SLURM_UNITS: which capacity units Slurm runs, and what one instance of each is
  in Slurm terms.  Entries separated by `;`:

      ml.g5.xlarge=gpu,gpus=1,cpus=4,memory=16G;  ml.c5.xlarge=cpu,cpus=2,memory=4G

  `UNIT=PARTITION` then per-instance GPUs (default 0), CPUs (default 1) and memory
  (default 1G; a number of MiB or with M/G/T).  An attempt on N instances asks for N times
  these.

- QUOTAWEB_SLURM_NODES: which node holds which instances, in QUOTAWEB_INSTANCES' syntax
  (quotaweb.executors.instances) per node, nodes separated by `|`:

      gpu-node-1: ml.g5.xlarge=0-3 | gpu-node-2: ml.g5.xlarge=4-7@0-3

  so instance #5 is GPU 1 of gpu-node-2.

QUOTAWEB_SLURM_GPU_TYPE says how an attempt gets exactly its GPUs.  With a pattern such as
`i{index}`, the cluster's gres.conf gives every GPU a Type of its own (gpu:i0, gpu:i1...)
and the job asks for those types (`--gres=gpu:i2:1,gpu:i3:1`): Slurm allocates exactly
those GPUs and sets CUDA_VISIBLE_DEVICES itself, and ConstrainDevices may be on.  Empty,
the job asks for a count (`--gres=gpu:2`) and the batch script sets CUDA_VISIBLE_DEVICES
to the GPUs Quotaweb chose; that is right only while ConstrainDevices is off (Slurm then
counts, Quotaweb places).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from ..instances import Declared, Placement, parse_declaration, place

NODE = re.compile(r"^[A-Za-z0-9._-]{1,255}$")
PARTITION = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
MEMORY = re.compile(r"^(\d+)\s*([MGT]?)i?B?$", re.IGNORECASE)
MEBIBYTES = {"": 1, "M": 1, "G": 1024, "T": 1024 * 1024}


@dataclass(frozen=True)
class UnitShape:
    """What one instance of a capacity unit is in Slurm."""

    partition: str
    gpus: int = 0
    cpus: int = 1
    memory_mb: int = 1024


@dataclass(frozen=True)
class SlurmMap:
    units: dict[str, UnitShape]
    instances: dict[tuple[str, int], tuple[str, tuple[str, ...]]]  # -> (node, GPUs)
    gpu_type: str  # "" or a pattern with {index}

    def runs(self, capacity_unit: str) -> bool:
        return capacity_unit in self.units

    def placement(self, capacity_unit: str, numbers: list[int]) -> Placement:
        """Which nodes and GPUs hold these instances (one rank per node)."""
        hosted = {
            number: (node, ",".join(devices))
            for (unit, number), (node, devices) in self.instances.items()
            if unit == capacity_unit and number in numbers
        }
        return place(numbers, hosted)


def parse_units(text: str) -> dict[str, UnitShape]:
    units: dict[str, UnitShape] = {}
    for entry in (part.strip() for part in text.split(";")):
        if not entry:
            continue
        unit, equals, rest = entry.partition("=")
        unit = unit.strip()
        fields = [field.strip() for field in rest.split(",")]
        if not equals or not unit or not PARTITION.match(fields[0]):
            raise ImproperlyConfigured(
                f"QUOTAWEB_SLURM_UNITS: {entry!r} is not UNIT=PARTITION[,gpus=N][,cpus=N]"
                "[,memory=SIZE] (for example ml.g5.xlarge=gpu,gpus=1,cpus=4,memory=16G).")
        if unit in units:
            raise ImproperlyConfigured(f"QUOTAWEB_SLURM_UNITS names {unit} twice.")
        values = {"gpus": 0, "cpus": 1, "memory": 1024}
        for field in fields[1:]:
            name, _, value = (part.strip() for part in field.partition("="))
            if name not in values:
                raise ImproperlyConfigured(
                    f"QUOTAWEB_SLURM_UNITS: {unit} has an unknown field {name!r} "
                    "(gpus, cpus or memory).")
            values[name] = _memory(unit, value) if name == "memory" else _count(unit, name, value)
        if values["cpus"] < 1 or values["memory"] < 1:
            raise ImproperlyConfigured(
                f"QUOTAWEB_SLURM_UNITS: {unit} needs at least one CPU and some memory.")
        units[unit] = UnitShape(fields[0], values["gpus"], values["cpus"], values["memory"])
    return units


def _count(unit: str, name: str, value: str) -> int:
    if not value.isdigit():
        raise ImproperlyConfigured(
            f"QUOTAWEB_SLURM_UNITS: {unit}'s {name} must be a whole number, not {value!r}.")
    return int(value)


def _memory(unit: str, value: str) -> int:
    match = MEMORY.match(value)
    if match is None:
        raise ImproperlyConfigured(
            f"QUOTAWEB_SLURM_UNITS: {unit}'s memory must be a size such as 4096, 512M or "
            f"16G, not {value!r}.")
    return int(match.group(1)) * MEBIBYTES[match.group(2).upper()]


def parse_nodes(text: str) -> dict[tuple[str, int], tuple[str, tuple[str, ...]]]:
    instances: dict[tuple[str, int], tuple[str, tuple[str, ...]]] = {}
    for entry in (part.strip() for part in text.split("|")):
        if not entry:
            continue
        node, colon, declared = entry.partition(":")
        node = node.strip()
        if not colon or not NODE.match(node):
            raise ImproperlyConfigured(
                f"QUOTAWEB_SLURM_NODES: {entry!r} is not NODE: DECLARATION (for example "
                "gpu-node-1: ml.g5.xlarge=0-3).")
        declaration = parse_declaration(declared)
        if declaration.hosts_unlisted:
            raise ImproperlyConfigured(
                f"QUOTAWEB_SLURM_NODES: node {node} cannot take '*': every Slurm instance "
                "is on a named node.")
        for item in declaration.instances:
            key = _key(item)
            if key in instances:
                raise ImproperlyConfigured(
                    f"QUOTAWEB_SLURM_NODES: instance #{item.number} of {item.capacity_unit} "
                    f"is on {instances[key][0]} and {node}.")
            instances[key] = (node, item.devices)
    return instances


def _key(item: Declared) -> tuple[str, int]:
    return (item.capacity_unit, item.number)


def slurm_map() -> SlurmMap:
    """The map from settings (cheap: parsed on every call, so tests can change settings)."""
    return build_map(str(settings.QUOTAWEB.get("SLURM_UNITS") or ""),
                     str(settings.QUOTAWEB.get("SLURM_NODES") or ""),
                     str(settings.QUOTAWEB.get("SLURM_GPU_TYPE") or ""))


def build_map(units_text: str, nodes_text: str, gpu_type: str) -> SlurmMap:
    """Parse and check the three settings together (quotaweb/settings.py calls this at
    start-up, so a bad map stops the server with its reason rather than a submission)."""
    units = parse_units(units_text)
    instances = parse_nodes(nodes_text)
    if gpu_type and "{index}" not in gpu_type:
        raise ImproperlyConfigured(
            "QUOTAWEB_SLURM_GPU_TYPE must contain {index} (for example i{index}).")
    for (unit, number), (node, devices) in instances.items():
        shape = units.get(unit)
        if shape is None:
            raise ImproperlyConfigured(
                f"QUOTAWEB_SLURM_NODES puts {unit} on {node}, but QUOTAWEB_SLURM_UNITS does "
                "not name that unit.")
        if len(devices) != shape.gpus:
            raise ImproperlyConfigured(
                f"QUOTAWEB_SLURM_NODES gives instance #{number} of {unit} {len(devices)} "
                f"GPUs, but QUOTAWEB_SLURM_UNITS says it has {shape.gpus}.")
    return SlurmMap(units, instances, gpu_type)


def enabled() -> bool:
    """Whether any capacity unit runs on Slurm (the backend is off otherwise)."""
    return bool(str(settings.QUOTAWEB.get("SLURM_UNITS") or "").strip())


def work_dir() -> Path:
    """Where the attempts' output files go: a directory the server and every node see at
    the same path (a shared filesystem on a real cluster)."""
    configured = settings.QUOTAWEB.get("SLURM_WORK_DIR")
    if configured:
        return Path(str(configured))
    return Path(settings.QUOTAWEB["WORK_DIR"]) / "slurm"
