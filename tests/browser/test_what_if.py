"""The what-if page in a real browser: an administrator replays the last minutes with QS1
unable to borrow, and sees today's and the changed configuration side by side, with both
timelines drawn (see conftest.py for the live server)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from playwright.sync_api import expect

from .conftest import QuotawebServer, SignedIn
from .test_dashboard import _submit


def test_a_what_if_shows_both_configurations(signed_in: SignedIn,
                                             server: QuotawebServer) -> None:
    alice = signed_in("alice")
    for number, priority in enumerate((3, 2, 1)):
        _submit(alice, server, f"qs1_whatif_{number}", "QS1", priority, duration=60)
    admin = signed_in("admin")
    violations: list[str] = []  # the page draws its charts within the CSP, as test_csp.py checks
    admin.on("console", lambda message: violations.append(message.text)
             if "Content Security Policy" in message.text else None)
    admin.add_init_script("""document.addEventListener('securitypolicyviolation',
        e => console.error('Content Security Policy violation: ' + e.violatedDirective))""")

    admin.click("nav >> text=What-if")
    start = datetime.now(UTC) - timedelta(minutes=5)
    end = datetime.now(UTC) + timedelta(minutes=10)
    admin.fill("#what-if-start", start.strftime("%Y-%m-%dT%H:%M:%S"))
    admin.fill("#what-if-end", end.strftime("%Y-%m-%dT%H:%M:%S"))
    # QS1 (limit 1, LEND_AND_BORROW) borrowed for its jobs; RESERVE cannot borrow.
    admin.select_option('select[name="strategy-QS1"]', "RESERVE")
    admin.check('input[name="hold-QS3"]')  # today's values, held (as recorded here)
    admin.click("#what-if-form button[type=submit]")

    results = admin.locator("#what-if-results")
    expect(results).to_contain_text("3 jobs replayed")
    expect(admin.locator('input[name="hold-QS3"]')).to_be_checked()  # the form as sent
    expect(admin.locator('select[name="strategy-QS1"]')).to_have_value("RESERVE")
    wait = admin.locator('tr[data-share="QS1"][data-figure="mean_wait_seconds"]')
    expect(wait).to_have_class("differs")
    recorded = float(wait.locator('[data-column="recorded"]').inner_text())
    changed = float(wait.locator('[data-column="changed"]').inner_text())
    # QS3 is RESERVE: two of QS1's jobs ran at once (its own and QS2's lent instance),
    # the third waited for one; without borrowing each waits for the one before.
    assert 0 < recorded < changed
    borrowed = admin.locator('tr[data-share="QS1"][data-figure="borrowed_instance_hours"]')
    expect(borrowed.locator('[data-column="changed"]')).to_have_text("0.0")
    assert float(borrowed.locator('[data-column="recorded"]').inner_text()) > 0
    for chart in ("#what-if-recorded-chart", "#what-if-changed-chart"):
        admin.wait_for_function(
            f"() => document.querySelectorAll('{chart} .scatterlayer .trace').length > 0")
    assert admin.errors == []
    assert violations == []
