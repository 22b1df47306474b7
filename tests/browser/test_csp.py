"""The Content-Security-Policy (issue 11, item 7) in a real browser: every dashboard page
draws and goes live without a single violation reported."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from .conftest import QuotawebServer, SignedIn

PAGES = ["/", "/fleet", "/shares/QS1", "/warm-pools", "/submit", "/tokens", "/api/v1/docs"]


def test_no_page_breaks_the_content_security_policy(signed_in: SignedIn,
                                                    server: QuotawebServer) -> None:
    page = signed_in("alice")
    violations: list[str] = []
    page.on("console", lambda message: violations.append(message.text)
            if "Content Security Policy" in message.text else None)
    page.add_init_script("""document.addEventListener('securitypolicyviolation',
        e => console.error('Content Security Policy violation: ' + e.violatedDirective))""")
    for path in PAGES:
        page.goto(f"{server.url}{path}")
        page.wait_for_load_state("networkidle")
        if path in ("/", "/shares/QS1"):
            expect(page.locator("#live-status")).to_have_text("live", timeout=15_000)
            assert page.evaluate("document.getElementById('timeline').data.length") > 0
        if path == "/api/v1/docs":
            expect(page.locator("#swagger-ui .info")).to_be_visible(timeout=15_000)
    errors: list[Any] = page.errors
    assert not violations, violations
    assert not errors, errors
