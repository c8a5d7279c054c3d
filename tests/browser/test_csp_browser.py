"""The Content-Security-Policy in a real Chromium: the pages load and work with no
violation, and an inline style or script injected into them is refused (the control
case that shows the check can fail). A stale snapshot shows the stale badge."""
from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from dashboard.simulate import publish_from_db
from jobs.models import ImportJob
from orgs.services import org_hold
from tests.browser.conftest import SETTLE_JS, login, settle
from tests.browser.test_dashboard_browser import world  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Records every CSP violation the page reports, from its first script on.
WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__csp.push(e.violatedDirective + " " + (e.blockedURI || "inline")));
"""


def _page(browser, base: str, username: str, then: str):
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    context.add_init_script(WATCH)
    context.add_init_script(SETTLE_JS)
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text) if m.type in ("error", "warning") else None)
    login(page, base, username, then=then)
    return page, console


def _violations(page, console: list[str]) -> list[str]:
    return page.evaluate("window.__csp") + [c for c in console if "Content Security Policy" in c]


@pytest.mark.parametrize(("username", "path", "ready"), [
    ("root", "/dashboard/", "#live[data-state=live]"),
    ("alice", "/orgs/acme/", "[data-live][data-state=live]"),
    ("root", "/admin/", "#live-counters [data-state=live]"),
    ("root", "/admin/charts/chart/", "#live-counters [data-state=live]"),
    ("root", "/charts/new/", "form"),
    ("root", "/admin/orgs/org/", "#live-counters [data-state=live]"),
    ("root", "/admin/jobs/importjob/", "#live-counters [data-state=live]"),
    ("root", "/api/v1/docs", "#swagger-ui .opblock"),  # Swagger UI from static files, its schema loaded
], ids=["dashboard", "org-page", "admin", "admin-charts", "chart-form", "admin-orgs", "admin-imports", "api-docs"])
def test_pages_run_under_the_policy_without_a_violation(browser, browser_server, redis_layer_publish, world,  # noqa: F811
                                                        username, path, ready):
    org_hold(org=world["beta"])  # the org list shows its "held" badge
    if path == "/admin/jobs/importjob/":
        ImportJob.objects.create(filename="charts.csv", format="csv", data=b"", total_rows=10, next_row=4)  # its progress bar
    redis_layer_publish()
    page, console = _page(browser, browser_server, username, path)
    expect(page.locator(ready).first).to_be_attached(timeout=10_000)
    if path == "/admin/orgs/org/":
        expect(page.locator("#result_list")).to_contain_text("held")
    if path == "/dashboard/":
        expect(page.locator("tr[data-chart-id]")).to_have_count(5)  # the scripts ran and rendered the order
        expect(page.locator("#orgs-body .bar span").first).to_have_attribute("style", re.compile("width"))
    settle(page)  # its scripts have run, its requests and the snapshot are in
    assert _violations(page, console) == []
    # The control case: an injected inline style and inline script are refused and reported.
    page.evaluate("""() => {
        const d = document.createElement("div"); d.innerHTML = '<span style="color:red">x</span>';
        document.body.appendChild(d);
        const s = document.createElement("script"); s.textContent = "window.__ran = 1"; document.body.appendChild(s);
    }""")
    page.wait_for_function("() => window.__csp.some((v) => v.startsWith('script-src'))", timeout=5_000)
    assert page.evaluate("window.__ran") is None


def test_a_stale_snapshot_shows_the_badge_in_the_browser(browser, browser_server, redis_url, world):  # noqa: F811
    publish_from_db(now=time.time() - 3600)
    page, console = _page(browser, browser_server, "root", "/dashboard/")
    expect(page.locator("#stale")).to_be_visible()
    expect(page.locator("#stale")).to_contain_text("Stale: the scheduler's last snapshot is 1 h")
    expect(page.locator("#waiting")).to_be_visible()
    assert _violations(page, console) == []
