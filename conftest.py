"""Rules that hold for every test session of the repository.

A test never skips: a check that cannot run must fail, so a green run always means that
every check ran. Any skipped, xfailed or xpassed outcome therefore fails the session.
"""

from __future__ import annotations

import sys

import pytest

Report = pytest.CollectReport | pytest.TestReport


def _reason(report: Report) -> str:
    """Return the reason pytest recorded for a skip or xfail, whatever shape its report has."""
    wasxfail = getattr(report, "wasxfail", None)
    if wasxfail is not None:
        return str(wasxfail) or "no reason given"
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


class NeverSkip:
    """Collects every test that did not run its check and fails the session if there is one."""

    def __init__(self) -> None:
        self.not_run: list[str] = []

    def _record(self, report: Report) -> None:
        if hasattr(report, "wasxfail"):
            kind = "xfailed" if report.skipped else "xpassed"
        elif report.skipped:
            kind = "skipped"
        else:
            return
        self.not_run.append(f"{kind}: {report.nodeid}: {_reason(report)}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._record(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # A module-level pytest.skip() or pytest.importorskip() skips at collection time.
        self._record(report)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.not_run:
            return
        lines = [
            f"{len(self.not_run)} test(s) skipped or marked xfail, but the project rule is "
            "that a test never skips. Make each one run its real check, or fail:",
            *(f"  {entry}" for entry in self.not_run),
        ]
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("")  # end the progress line first
            reporter.write_sep("=", "SKIPPED TESTS FAIL THE RUN", red=True, bold=True)
            for line in lines:
                reporter.write_line(line, red=True)
        else:
            print("\n".join(lines), file=sys.stderr)
        if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every test a node id of its own.  Schemathesis's parametrized test makes one
    item per API operation, all with the same node id (their names differ); pytest-xdist
    schedules by node id and would run only one of them (scripts/test runs two processes)."""
    seen: dict[str, int] = {}
    for item in items:
        seen[item.nodeid] = seen.get(item.nodeid, 0) + 1
    for item in items:
        if seen[item.nodeid] > 1:
            # pytest 9 keeps the node id as the parent's id and a child name (Node._id).
            item._id = item.parent.id.child(item.name)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(NeverSkip(), "quotaweb-never-skip")
