"""Chromium: the dashboard's controls can be reached, by the mouse at common widths (nothing
lies over "Set policies", no field is pushed off its card) and by the keyboard (a skip link,
the focus kept on the order after Pause and Resume)."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from control.models import SchedulerSettings
from tests.browser.conftest import login
from tests.factories import make_chart, make_org, make_user, make_workflow

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def world(db):
    wf = make_workflow("code")
    acme = make_org("Acme", weight=2)
    charts = [make_chart(acme, wf, external_id=f"acme-{i}") for i in range(3)]
    make_user("root", superuser=True)
    return {"wf": wf, "acme": acme, "charts": charts}


def open_dashboard(browser, base: str, width: int = 1440):
    page = browser.new_context(viewport={"width": width, "height": 1000}).new_page()
    login(page, base, "root", then="/dashboard/")
    expect(page.locator("#live")).to_have_attribute("data-state", "live", timeout=10_000)
    return page


@pytest.mark.parametrize("width", [1280, 1400, 1920])
def test_set_policies_is_clicked_with_the_mouse_and_stays_on_its_card(browser, browser_server, redis_layer_publish,
                                                                       world, width):
    redis_layer_publish()
    page = open_dashboard(browser, browser_server, width)
    card = page.locator(".card.dial").bounding_box()
    for sel in ("#share-select", "#quantum-input", "#dispatch-select", "#policies-form button[type=submit]",
                "#budget-input", "#plan-clear-by", "#plan-meet-due"):
        box = page.locator(sel).bounding_box()
        assert card["x"] <= box["x"] and box["x"] + box["width"] <= card["x"] + card["width"], (sel, box, card)
    page.select_option("#share-select", "work")
    # a real click: Playwright refuses one that another element (the Charts card) would take
    page.locator("#policies-form button[type=submit]").click(timeout=3_000)
    for _ in range(50):
        if SchedulerSettings.get().share == "work":
            break
        page.wait_for_timeout(100)
    assert SchedulerSettings.get().share == "work"


def _active(page) -> dict:
    return page.evaluate("""() => { const a = document.activeElement, tr = a.closest("tr");
        return {tag: a.tagName, action: a.dataset.action || null, chart: tr ? tr.dataset.chartId || null : null}; }""")


def test_the_focus_stays_on_the_order_after_pause_and_resume(browser, browser_server, redis_layer_publish, world):
    """docs/operating.md: a button that held the focus hands it to the matching control. A
    paused chart moves to the order's tail (the row is moved in the table) or, under the
    filter "queued in the fair order", leaves the page: the focus never falls to <body>."""
    first, second, third = world["charts"]
    redis_layer_publish()
    page = open_dashboard(browser, browser_server)
    rows = page.locator("#order-body tr")
    expect(rows).to_have_count(3)
    page.locator(f'#order-body tr[data-chart-id="{first.pk}"] button[data-action="pause"]').focus()
    page.keyboard.press("Enter")
    expect(page.locator(f'#order-body tr[data-chart-id="{first.pk}"]')).to_have_attribute("data-state", "paused",
                                                                                           timeout=5_000)
    redis_layer_publish()  # the scheduler's next order: the paused chart set aside, after the others
    expect(rows.last).to_have_attribute("data-chart-id", str(first.pk), timeout=5_000)
    assert _active(page) == {"tag": "BUTTON", "action": "resume", "chart": str(first.pk)}
    page.keyboard.press("Enter")  # Resume, with the keyboard: the focus follows the row again
    expect(page.locator(f'#order-body tr[data-chart-id="{first.pk}"]')).to_have_attribute("data-state", "ordered",
                                                                                           timeout=5_000)
    assert _active(page) == {"tag": "BUTTON", "action": "pause", "chart": str(first.pk)}

    # the filter "queued in the fair order": a paused chart leaves the page
    redis_layer_publish()
    expect(page.locator('#order-body tr[data-state="ordered"]')).to_have_count(3, timeout=5_000)
    page.select_option("#state-filter", "ordered")
    page.wait_for_function("() => window.fairDashboard.order().state === 'ordered'", timeout=5_000)
    expect(rows).to_have_count(3)
    page.locator(f'#order-body tr[data-chart-id="{second.pk}"] button[data-action="pause"]').focus()
    page.keyboard.press("Enter")
    expect(page.locator(f'#order-body tr[data-chart-id="{second.pk}"]')).to_have_attribute("data-state", "paused",
                                                                                            timeout=5_000)
    redis_layer_publish()
    expect(page.locator(f'#order-body tr[data-chart-id="{second.pk}"]')).to_have_count(0, timeout=5_000)
    expect(rows).to_have_count(2)
    got = _active(page)
    # the matching control of the row that took its place
    assert got == {"tag": "BUTTON", "action": "pause", "chart": str(third.pk)}, got


def test_a_skip_link_and_the_due_list_after_the_order_bring_the_keyboard_to_pause(browser, browser_server,
                                                                                  redis_layer_publish, world):
    """The first Tab reaches "Skip to the order", and from it a few Tabs reach the first Pause;
    without it, the Tabs to the first Pause go through no link of the Due list (it comes after
    the order), where 171 Tab presses reached it on a busy dashboard."""
    from datetime import timedelta

    from django.utils import timezone

    from orgs.services import org_set_turnaround

    org_set_turnaround(org=world["acme"], turnaround=3600)
    now = timezone.now()
    for i in range(20):  # late: twenty links in the Due list
        make_chart(world["acme"], world["wf"], external_id=f"late-{i}", created_at=now - timedelta(hours=2, minutes=i))
    redis_layer_publish()
    page = open_dashboard(browser, browser_server)
    expect(page.locator("#due-charts-body tr")).to_have_count(23)
    expect(page.locator("#order-body button[data-action=pause]").first).to_be_visible()

    def tabs_to_pause(limit: int) -> tuple[int, list[str]]:
        passed = []
        for n in range(1, limit + 1):
            page.keyboard.press("Tab")
            where = page.evaluate("""() => { const a = document.activeElement;
                return (a.closest('#order-body') && a.dataset.action === 'pause') ? 'pause'
                     : a.closest('#due-panel') ? 'due' : a.tagName + ':' + (a.textContent || '').trim().slice(0, 30); }""")
            if where == "pause":
                return n, passed
            passed.append(where)
        raise AssertionError(f"no Pause within {limit} Tab presses: {passed}")

    page.keyboard.press("Tab")
    skip = page.evaluate("() => [document.activeElement.textContent.trim(), document.activeElement.getAttribute('href')]")
    assert skip[0] == "Skip to the order", skip
    box = page.locator("a.skip-link").first.bounding_box()
    assert box and box["width"] > 0 and box["y"] >= 0  # shown while it has the focus
    page.keyboard.press("Enter")
    n, passed = tabs_to_pause(15)
    assert "due" not in passed

    page.reload()
    expect(page.locator("#live")).to_have_attribute("data-state", "live", timeout=10_000)
    expect(page.locator("#order-body button[data-action=pause]").first).to_be_visible()
    n, passed = tabs_to_pause(300)
    assert "due" not in passed, f"the Due list's links come before the order: {passed}"
