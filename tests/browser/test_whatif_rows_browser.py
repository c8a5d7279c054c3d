"""Chromium: the what-if preview's "Orgs that change" shows what changes for each org it
lists, never a row or a cell that reads the same before and after ("05:55 → 05:55", "0 → 0")."""
from __future__ import annotations

import re

import pytest
import redis
from playwright.sync_api import expect

from common import previews
from tests.browser.conftest import login
from tests.browser.test_whatif_browser import _orgs_world
from tests.dashboard.test_whatif_view import Responder
from tests.factories import make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_preview_lists_only_what_changes(browser, browser_server, redis_layer_publish, redis_url):
    acme, beta, cedar = _orgs_world()
    make_user("root", superuser=True)
    r = redis.Redis.from_url(redis_url)
    r.delete(previews.REQUESTS)
    redis_layer_publish()
    page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
    login(page, browser_server, "root", then="/dashboard/")
    expect(page.locator("#live")).to_have_attribute("data-state", "live", timeout=10_000)
    out = page.locator("#whatif-orgs")
    responder = Responder(r)
    page.locator(f"#orgs-body tr[data-org-id='{acme.pk}'] input[data-field=weight]").fill("3")
    expect(out).to_have_attribute("data-state", "ready", timeout=10_000)
    responder.thread.join(5)
    rows = out.locator("tr[data-preview-org]")
    expect(rows.first).to_be_visible()
    # Acme clears sooner, its at-risk count stays 0: the count is not shown as "0 → 0"
    expect(out.locator(f"tr[data-preview-org='{acme.pk}'] td").last).to_have_text("unchanged")
    expect(out.locator(f"tr[data-preview-org='{cedar.pk}'] td").last).to_have_text("0 → 1")
    for cells in (rows.nth(i).locator("td").all_inner_texts() for i in range(rows.count())):
        changed = [c for c in cells[1:] if c != "unchanged"]
        assert changed, f"a row that changes nothing: {cells}"
        for c in changed:
            m = re.fullmatch(r"(.+) → (.+)", c)
            assert m and m.group(1) != m.group(2), f"a cell that reads the same before and after: {cells}"
