"""The cockpit in headless Chromium against a real daphne (issue: the controls' traps,
wording, history, search, failures, re-run, activity).

Each bug test drives the page the way an operator does and fails on the code before the fix:
the confirm that silently expired, the focused row that never updated, 12 h times, a
stale weight sent by "Set".
"""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from charts.models import Chart, ChartState
from charts.services import chart_pause
from control.models import AuditEntry
from orgs.models import Org
from orgs.services import org_set_weight
from tests.browser.conftest import login
from tests.browser.test_dashboard_browser import open_dashboard, wait_for
from tests.factories import make_chart, make_org, make_user, make_workflow

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def world(db):
    wf = make_workflow("code")
    acme, fjord = make_org("Acme Health", weight=2), make_org("Fjord Health")
    charts = [make_chart(acme, wf, external_id=f"mrn-{i}") for i in range(3)]
    charts += [make_chart(fjord, wf, external_id=f"fj-{i}") for i in range(2)]
    make_user("root", superuser=True)
    return {"wf": wf, "acme": acme, "fjord": fjord, "charts": charts}


def focused_row_key(page) -> str | None:
    return page.evaluate("(() => { const tr = document.activeElement && document.activeElement.closest('tr');"
                         " return tr ? tr.dataset.key : null; })()")


# --- bug 1: "Confirm cancel" ------------------------------------------------------------------


def test_confirm_cancel_visibly_expires_and_a_shown_confirm_always_cancels(browser, browser_server,
                                                                          redis_layer_publish, world):
    redis_layer_publish()
    page = open_dashboard(browser, browser_server, clock=True)
    target = world["charts"][1]
    button = page.locator(f'#order-body tr[data-chart-id="{target.pk}"] button[data-action="cancel"]')
    button.click()
    expect(button).to_have_text("Confirm cancel")
    # Unconfirmed, it turns back into "Cancel" (the bug: it kept its label and only re-armed):
    # the page's clock moved past the 4 s it stays armed, instead of waiting them out.
    page.clock.fast_forward(5_000)
    expect(button).to_have_text("Cancel", timeout=10_000)
    assert Chart.objects.get(pk=target.pk).state == ChartState.QUEUED
    button.click()
    expect(button).to_have_text("Confirm cancel")
    button.click()
    wait_for(lambda: Chart.objects.get(pk=target.pk).state == ChartState.CANCELLED, what="the chart cancelled")
    expect(page.locator(".toast").last).to_contain_text("Cancelled mrn-1 (Acme Health)")


# --- bug 2: the focused row -------------------------------------------------------------------


def test_the_focused_row_updates_and_set_never_sends_a_stale_weight(browser, browser_server, redis_layer_publish,
                                                                    world):
    redis_layer_publish()
    page = open_dashboard(browser, browser_server)
    fjord = world["fjord"]
    row = page.locator(f'#orgs-body tr[data-org-id="{fjord.pk}"]')
    row.locator('button[data-action="hold"]').click()  # a person's click: the button keeps the focus
    wait_for(lambda: Org.objects.get(pk=fjord.pk).weight == 0, what="Fjord held")
    # The row under the focus shows the hold: badge, "Release", weight 0, and the focus stays in the row.
    expect(row.locator(".badge.held")).to_be_visible(timeout=5_000)
    expect(row.locator('button[data-action="release"]')).to_be_visible()
    expect(row.locator("input[data-field=weight]")).to_have_value("0")
    assert focused_row_key(page) == f"o{fjord.pk}"
    assert page.evaluate("document.activeElement.dataset.action") == "release"

    # "Set" next to a weight nobody typed sends nothing (the trap: it silently released the hold).
    row.locator('button[data-action="set_weight"]').click()
    expect(page.locator(".toast.error").last).to_contain_text("Type a new weight for Fjord Health first")
    assert Org.objects.get(pk=fjord.pk).weight == 0

    # Release with the keyboard focus still on the row's button: the row updates again.
    row.locator('button[data-action="release"]').click()
    wait_for(lambda: Org.objects.get(pk=fjord.pk).weight == 1, what="Fjord released")
    expect(row.locator(".badge.held")).to_have_count(0, timeout=5_000)
    expect(row.locator('button[data-action="hold"]')).to_be_focused()


def test_a_focused_input_follows_live_updates_until_the_operator_types(browser, browser_server, redis_layer_publish,
                                                                       world):
    redis_layer_publish()
    page = open_dashboard(browser, browser_server)
    acme = world["acme"]
    weight = page.locator(f'#orgs-body tr[data-org-id="{acme.pk}"] input[data-field=weight]')
    weight.click()  # focused, nothing typed: live updates still reach it
    org_set_weight(org=acme, weight=4)
    redis_layer_publish()
    expect(weight).to_have_value("4", timeout=5_000)
    weight.press("End")
    weight.type("7")  # now it is being edited: "47" stays while updates arrive
    org_set_weight(org=acme, weight=5)
    redis_layer_publish()
    page.wait_for_function(f"() => window.fairDashboard.state().orgs.find((o) => o.id === {acme.pk}).weight === 5",
                           timeout=5_000)  # the update reached the page...
    expect(weight).to_have_value("47")  # ...and did not overwrite what is being typed
    weight.press("Enter")
    wait_for(lambda: Org.objects.get(pk=acme.pk).weight == 47, what="the typed weight sent")
    expect(page.locator(".toast").last).to_contain_text("Set the weight of Acme Health to 47 (was 5)")


# --- bug 3: wording and format ---------------------------------------------------------------------


def test_times_are_24h_and_toasts_speak_the_operators_words(browser, browser_server, redis_layer_publish, world):
    redis_layer_publish()
    page = open_dashboard(browser, browser_server)
    first = page.locator("#order-body tr").first
    expect(first.locator("td").nth(6)).to_have_text(re.compile(r"^\d{2}:\d{2}$"))
    assert not re.search(r"\b(AM|PM)\b", page.locator("body").inner_text())
    target = world["charts"][2]
    page.locator(f'#order-body tr[data-chart-id="{target.pk}"] button[data-action="pause"]').click()
    expect(page.locator(".toast").last).to_contain_text("Paused mrn-2 (Acme Health)")
    page.locator(f'#orgs-body tr[data-org-id="{world["fjord"].pk}"] button[data-action="hold"]').click()
    expect(page.locator(".toast").last).to_contain_text("Held Fjord Health")
    # The Activity feed shows both, live.
    expect(page.locator("#activity-body")).to_contain_text("Held Fjord Health", timeout=5_000)
    expect(page.locator("#activity-body")).to_contain_text("Paused mrn-2 (Acme Health)")


def test_paused_charts_stay_findable_and_the_depth_plot_is_logarithmic(browser, browser_server, redis_layer_publish,
                                                                       world):
    chart_pause(chart=world["charts"][0])
    redis_layer_publish()
    page = open_dashboard(browser, browser_server)
    page.select_option("#state-filter", "paused")
    expect(page.locator("#order-body tr")).to_have_count(1, timeout=5_000)
    expect(page.locator("#order-body tr")).to_have_attribute("data-chart-id", str(world["charts"][0].pk))
    expect(page.locator("#order-body tr")).to_have_class("paused")
    assert page.evaluate("Chart.getChart(document.getElementById('plot-depth')).options.scales.y.type") == "logarithmic"


def test_favicon_and_admin_header_and_chart_list_at_1440(browser, browser_server, redis_layer_publish, world):
    # Names as long as real ones: the list must still show Position and ETA without scrolling.
    big = make_org("Northwind Regional Health Partners")
    wf = make_workflow("radiology-report-summary")
    for i in range(5):
        make_chart(big, wf, external_id=f"mrn-2026-11-000{i:03d}-radiology")
    redis_layer_publish()
    context = browser.new_context(viewport={"width": 1440, "height": 900}, locale="en-US")
    page = context.new_page()
    login(page, browser_server, "root", then="/admin/")
    assert page.request.get(f"{browser_server}/favicon.ico").status == 200
    assert page.locator('link[rel="icon"]').count() >= 1
    expect(page.locator("#live-counters .live")).to_have_attribute("data-state", "live", timeout=10_000)
    counters, tools = page.locator("#live-counters").bounding_box(), page.locator("#user-tools").bounding_box()
    overlap = not (counters["y"] >= tools["y"] + tools["height"] or tools["y"] >= counters["y"] + counters["height"])
    assert not overlap or counters["x"] >= tools["x"] + tools["width"], (counters, tools)
    assert counters["height"] < 2 * 22, "the counters wrapped onto a second line"

    page.goto(f"{browser_server}/admin/charts/chart/")
    assert not re.search(r"\d[ap]\.m\.", page.locator("#result_list").inner_text())
    for column in ("live_position", "live_eta"):
        head = page.locator(f"#result_list th.column-{column}")
        box = head.bounding_box()
        assert box is not None and box["x"] + box["width"] <= 1440, (column, box)
        expect(head).to_have_class(re.compile("sortable"))
    page.locator("#result_list th.column-live_position a").first.click()
    expect(page.locator("#result_list tbody tr").first.locator("td.field-live_position")).to_have_text("1")


# --- bug 4: the producer form ------------------------------------------------------------------------


def test_producer_form_is_styled_warns_about_a_hold_and_links_to_the_status(browser, browser_server,
                                                                         redis_layer_publish, world):
    Org.objects.filter(pk=world["fjord"].pk).update(weight=0)
    redis_layer_publish()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    login(page, browser_server, "root", then="/charts/new/")
    assert page.locator("#id_org").evaluate("el => getComputedStyle(el).boxSizing") == "border-box"
    page.select_option("#id_org", label="Fjord Health (held: charts will not start until it is released)")
    page.select_option("#id_workflow", label="code")
    page.fill("#id_external_id", "fj-new")
    page.click("#submit-chart button[type=submit]")
    expect(page.locator(".messages")).to_contain_text("Fjord Health is held: fj-new will not start until the org is released.")
    page.locator(".messages a", has_text="fj-new").click()
    expect(page.locator("#chart-position")).to_be_visible()
    # Identical content again: the chart already submitted.
    page.goto(f"{browser_server}/charts/new/")
    page.select_option("#id_org", label="Fjord Health (held: charts will not start until it is released)")
    page.select_option("#id_workflow", label="code")
    page.fill("#id_external_id", "fj-new")
    page.click("#submit-chart button[type=submit]")
    expect(page.locator(".messages")).to_contain_text("Already submitted, here it is")
    assert Chart.objects.filter(external_id="fj-new").count() == 1


# --- history, search, failures, re-run ------------------------------------------------------------------


def test_search_opens_a_failed_chart_rerun_it_and_see_it_in_activity_and_failures(browser, browser_server,
                                                                                    redis_layer_publish, world):
    now = timezone.now()
    failed = make_chart(world["acme"], world["wf"], external_id="mrn-77", state=ChartState.FAILED,
                        dispatched_at=now - timedelta(minutes=2), started_at=now - timedelta(minutes=2),
                        finished_at=now - timedelta(minutes=1), error="ValueError: page 3 unreadable\nmore")
    redis_layer_publish()
    watcher = open_dashboard(browser, browser_server)
    page = open_dashboard(browser, browser_server)
    page.fill(".cockpit-nav input[type=search]", "mrn-77")
    page.press(".cockpit-nav input[type=search]", "Enter")
    expect(page).to_have_url(f"{browser_server}/charts/{failed.pk}/")
    expect(page.locator("#chart-error")).to_contain_text("ValueError: page 3 unreadable")
    expect(page.locator("#temporal-link")).to_have_attribute("href", re.compile(f"/workflows/chart-{failed.pk}$"))
    expect(page.locator("#timeline")).to_contain_text("dispatched")
    page.click(f'button[data-rerun="{failed.pk}"]')
    rerun = Chart.objects.get(rerun_of=failed)
    expect(page).to_have_url(f"{browser_server}/charts/{rerun.pk}/")
    expect(page.locator("#rerun-of")).to_contain_text("mrn-77")
    expect(page.locator("h2").first).to_contain_text("mrn-77~rerun-2")
    assert Chart.objects.get(pk=failed.pk).state == ChartState.FAILED  # the original is intact
    expect(watcher.locator("#activity-body")).to_contain_text(f"Re-ran mrn-77 (Acme Health) as chart #{rerun.pk}",
                                                              timeout=5_000)
    assert AuditEntry.objects.get(action="rerun").actor_name == "root"

    page.goto(f"{browser_server}/dashboard/failures/")
    expect(page.locator("#failures")).to_contain_text("ValueError: page 3 unreadable")
    expect(page.locator("#failures")).not_to_contain_text("more")
    expect(page.locator("#by-workflow")).to_contain_text("code")


def test_history_filters_and_pages(browser, browser_server, world, monkeypatch):
    now = timezone.now()
    done = [make_chart(world["acme"] if i % 2 else world["fjord"], world["wf"], external_id=f"done-{i}",
                       state=ChartState.FAILED if i % 3 == 0 else ChartState.SUCCEEDED,
                       started_at=now - timedelta(minutes=60 - i), finished_at=now - timedelta(minutes=59 - i))
            for i in range(7)]
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    login(page, browser_server, "root", then="/dashboard/history/")
    expect(page.locator("#history tbody tr")).to_have_count(7)
    page.select_option("#id_state", "failed")
    page.click("#history-filters button[type=submit]")
    expect(page.locator("#history tbody tr")).to_have_count(3)
    expect(page.locator("#history tbody tr").first).to_contain_text("done-6")
    page.select_option("#id_state", "")
    page.select_option("#id_org", label="Acme Health")
    page.click("#history-filters button[type=submit]")
    expect(page.locator("#history tbody tr")).to_have_count(3)
    assert {c.external_id for c in done if c.org_id == world["acme"].pk} == set(
        t.split()[0] for t in page.locator("#history tbody td.mono").all_inner_texts())
