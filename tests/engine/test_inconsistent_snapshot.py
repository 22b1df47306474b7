"""A snapshot that contradicts itself is refused with InconsistentSnapshot, whose message
names the contradiction.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from scheduler import InconsistentSnapshot, Job, QuotaShare
from tests.engine.builders import (
    G5,
    LEND,
    NOW,
    RESERVE,
    decide,
    queued,
    running,
    share,
    snapshot,
    unit,
)


def active_on(instances: tuple[int, ...], n: int) -> Job:
    """A RUNNING job that needs n instances but holds `instances`."""
    job = running("a", share="S", seq=1, instances=instances)
    return dataclasses.replace(job, instance_count=n)


INCONSISTENT = [
    pytest.param(
        [share("S", 2)],
        [queued("a", share="S", seq=1), queued("a", share="S", seq=2)],
        "job a appears twice",
        id="duplicate-job-id",
    ),
    pytest.param(
        [share("S", 2)],
        [
            running("a", share="S", seq=1, instances=(0,)),
            running("b", share="S", seq=2, instances=(0,)),
        ],
        "job b and job a both hold instance 0",
        id="instance-held-twice",
    ),
    pytest.param(
        [share("S", 2)],
        [active_on((0,), 2)],
        "job a is RUNNING on 1 instances but needs 2",
        id="active-job-with-wrong-number-of-instances",
    ),
    pytest.param(
        [share("S", 2)],
        [queued("a", share="T", seq=1)],
        "job a belongs to unknown quota share T",
        id="job-of-unknown-share",
    ),
    pytest.param(
        [share("S", 2)],
        [running("a", share="S", seq=1, instances=(0,)),
         running("b", share="S", seq=2, instances=(0,)),
         queued("c", share="T", seq=3)],
        "job b and job a both hold instance 0",
        id="first-contradiction-in-order-when-the-bulk-check-fails",
    ),
    pytest.param(
        [share("S", 2, strategy=LEND, borrow_limit=50)],
        [],
        "quota share S has a borrow_limit but is LEND",
        id="borrow-limit-on-a-lend-share",
    ),
    pytest.param(
        [share("S", 2, strategy=RESERVE, borrow_limit=-1)],
        [],
        "quota share S has a borrow_limit but is RESERVE",
        id="borrow-limit-on-a-reserve-share",
    ),
]


@pytest.mark.parametrize(("shares", "jobs", "message"), INCONSISTENT)
def test_inconsistent_snapshot_is_refused_with_a_clear_message(
    shares: list[QuotaShare], jobs: list[Job], message: str
) -> None:
    with pytest.raises(InconsistentSnapshot, match=f"^{re.escape(message)}$"):
        decide(snapshot(NOW, [unit(G5, 2)], shares, jobs))
