"""QUOTAWEB_INSTANCES declarations and the placement of an attempt's instance numbers on
hosts and devices (quotaweb/executors/instances.py): pure functions, no database."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from quotaweb.executors.instances import Declared, Rank, parse_declaration, place


@pytest.mark.parametrize(("text", "instances", "unlisted"), [
    ("ml.g5.xlarge=0-3", [("ml.g5.xlarge", n, (str(n),)) for n in range(4)], False),
    ("ml.g5.xlarge=2-3@0,1", [("ml.g5.xlarge", 2, ("0",)), ("ml.g5.xlarge", 3, ("1",))], False),
    ("ml.p4d.24xlarge=0@0-7", [("ml.p4d.24xlarge", 0, tuple(str(d) for d in range(8)))], False),
    ("ml.c5.xlarge=0,2@none", [("ml.c5.xlarge", 0, ()), ("ml.c5.xlarge", 2, ())], False),
    # Without @, an entry takes the host's next unused GPUs.
    ("a=0-1; b=5", [("a", 0, ("0",)), ("a", 1, ("1",)), ("b", 5, ("2",))], False),
    ("*", [], True),
    ("a=0 *", [("a", 0, ("0",))], True),
    ("", [], False),
])
def test_a_declaration_names_instances_and_their_devices(
    text: str, instances: list[tuple[str, int, tuple[str, ...]]], unlisted: bool,
) -> None:
    declared = parse_declaration(text)
    assert list(declared.instances) == [Declared(*item) for item in instances]
    assert declared.hosts_unlisted is unlisted


@pytest.mark.parametrize(("text", "says"), [
    ("ml.g5.xlarge", "UNIT=NUMBERS"),
    ("ml.g5.xlarge=x", "not a list of numbers"),
    ("a=3-1", "empty or too large"),
    ("a=0-2@0,1", "the same number of devices"),
    ("a=0@0; b=0@0", "uses a device"),
    ("a=0; a=0@5", "declares an instance twice"),
    ("a=0,0", "repeats a number"),
])
def test_a_bad_declaration_is_refused_with_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=says):
        parse_declaration(text)


def test_an_attempts_instances_are_grouped_by_host_in_instance_order() -> None:
    hosted = {0: ("gpu-a", "0"), 1: ("gpu-a", "1"), 2: ("gpu-b", "0"), 3: ("gpu-b", "1")}
    assert place([3, 2], hosted).ranks == (Rank("gpu-b", (2, 3), ("0", "1")),)
    spanning = place([1, 2], hosted)
    assert spanning.ranks == (Rank("gpu-a", (1,), ("1",)), Rank("gpu-b", (2,), ("0",)))
    assert spanning.hosts == ["gpu-a", "gpu-b"] and spanning.unhosted == ()
    assert place([7], hosted).unhosted == (7,) and place([7], hosted).ranks == ()
