"""Re-runs: one run of a chart's content at a time, and re-run ids of long external ids.

A re-run is refused while another run of the same content (the chart, the chart it
re-ran, their other re-runs) is queued or running: a double click, two tabs or two
operators must not run it twice. The refusal is race-safe (two real transactions at
once). External ids of up to the maximum length keep getting re-run ids, and a search
for the original finds them.
"""
from __future__ import annotations

import threading
import time

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from charts import services as charts_services
from charts.models import Chart, ChartState
from charts.services import EXTERNAL_ID_MAX, chart_rerun
from dashboard import history
from dashboard.controls import apply_control
from control.models import AuditEntry
from tests.factories import make_chart, make_org, make_user, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world(db):
    return {"wf": make_workflow("code"), "acme": make_org("Acme"),
            "op": make_user("op", staff=True, perms=("charts.add_chart", "charts.view_chart"))}


def _failed(w, **fields) -> Chart:
    return make_chart(w["acme"], w["wf"], state=ChartState.FAILED, **fields)


def _finish(chart: Chart, state: str = ChartState.FAILED) -> None:
    Chart.objects.filter(pk=chart.pk).update(state=state)


# --- item 5: one live run at a time --------------------------------------------------------


@pytest.mark.parametrize("live_state", [ChartState.QUEUED, ChartState.RUNNING])
def test_a_rerun_is_refused_while_the_last_rerun_is_queued_or_running(world, live_state):
    original = _failed(world, external_id="mrn-7")
    first = chart_rerun(chart=original, actor=world["op"])
    _finish(first, live_state)
    with pytest.raises(ValidationError) as exc:
        chart_rerun(chart=original, actor=world["op"])
    assert exc.value.message_dict == {"rerun": [
        f"rerun: chart #{original.pk} is already being re-run as chart #{first.pk} (mrn-7~rerun-2), which is "
        f"{live_state}; re-run it again once that run has finished."]}
    assert Chart.objects.filter(rerun_of=original).count() == 1
    assert AuditEntry.objects.filter(action="rerun").count() == 1  # the refusal records nothing
    _finish(first, ChartState.CANCELLED)  # once it has finished, the chart can be re-run again
    assert chart_rerun(chart=original).external_id == "mrn-7~rerun-3"


def test_a_rerun_of_another_run_of_the_same_content_is_refused_too(world):
    """The original and its failed re-run are both on the failures page: re-running one
    while the other's re-run is queued would run the same content twice."""
    original = _failed(world, external_id="mrn-8")
    second = chart_rerun(chart=original)
    _finish(second)
    third = chart_rerun(chart=original)  # re-runs the content again: second has failed
    for chart in (second, original):
        with pytest.raises(ValidationError) as exc:
            chart_rerun(chart=chart)
        assert f"is already being re-run as chart #{third.pk} (mrn-8~rerun-3)" in exc.value.message_dict["rerun"][0]
        assert exc.value.live.pk == third.pk  # for the pages: they link to it
    _finish(third)
    fourth = chart_rerun(chart=second)
    assert (fourth.external_id, fourth.rerun_of_id) == ("mrn-8~rerun-4", second.pk)
    assert charts_services.run_lineage(original.pk) == {original.pk, second.pk, third.pk, fourth.pk}
    no_ext = make_chart(world["acme"], world["wf"], state=ChartState.CANCELLED)
    again = chart_rerun(chart=no_ext)
    assert again.external_id is None
    with pytest.raises(ValidationError, match=f"already being re-run as chart #{again.pk}, which is queued"):
        chart_rerun(chart=no_ext)


@pytest.mark.parametrize("external_id", ["mrn-9", None], ids=["external-id", "no-external-id"])
def test_two_reruns_at_once_make_one_chart(world, monkeypatch, external_id):
    """Two transactions at once (two operators, a double click): each finds no live re-run
    unless the check waits for the other's to commit. The window between the check and the
    insert is widened to 0.3 s so that a check-then-create without a lock loses. Without an
    external id no unique constraint catches the second insert: only the lock does."""
    original = _failed(world, external_id=external_id)
    slow = charts_services._rerun_external_id

    def slow_id(*args, **kwargs):
        got = slow(*args, **kwargs)
        time.sleep(0.3)
        return got

    monkeypatch.setattr(charts_services, "_rerun_external_id", slow_id)
    barrier = threading.Barrier(2)
    made, refused, errors = [], [], []

    def one() -> None:
        try:
            barrier.wait(5)
            made.append(chart_rerun(chart=original.pk, actor=world["op"]).pk)
        except ValidationError as exc:
            refused.append(exc.message_dict)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(made) == 1 and len(refused) == 1, (made, refused)
    shown = " (mrn-9~rerun-2)" if external_id else ""
    assert f"already being re-run as chart #{made[0]}{shown}, which is queued" in refused[0]["rerun"][0]
    assert list(Chart.objects.filter(rerun_of=original).values_list("pk", flat=True)) == made


def test_a_double_click_on_the_chart_page_lands_on_the_one_rerun(world, client):
    original = _failed(world, external_id="mrn-10")
    client.force_login(world["op"])
    first = client.post(f"/charts/{original.pk}/rerun/")
    new = Chart.objects.get(rerun_of=original)
    assert first.status_code == 302 and first.url == f"/charts/{new.pk}/"
    second = client.post(f"/charts/{original.pk}/rerun/", follow=True)
    assert second.redirect_chain[-1][0] == f"/charts/{new.pk}/"
    assert f"is already being re-run as chart #{new.pk}" in second.content.decode()
    assert Chart.objects.filter(rerun_of=original).count() == 1


def test_the_rerun_control_refuses_the_second_and_sends_nothing(world):
    original = _failed(world, external_id="mrn-11")
    ok = apply_control(world["op"], {"action": "rerun", "chart": original.pk})
    assert ok.ok
    again = apply_control(world["op"], {"action": "rerun", "chart": original.pk})
    assert not again.ok and again.event is None
    assert "is already being re-run as chart #" in again.errors["rerun"][0]
    assert Chart.objects.filter(rerun_of=original).count() == 1


def test_the_admin_bulk_rerun_of_two_runs_of_one_content_makes_one(world, admin_client):
    original = _failed(world, external_id="mrn-12")
    second = chart_rerun(chart=original)
    _finish(second)
    resp = admin_client.post("/admin/charts/chart/", {"action": "rerun", "_selected_action": [original.pk, second.pk]},
                             follow=True)
    text = resp.content.decode()
    assert "Re-ran 1 chart(s)." in text and "is already being re-run as chart #" in text
    assert Chart.objects.filter(external_id__startswith="mrn-12~rerun-").count() == 2


# --- item 6: long external ids --------------------------------------------------------------


@pytest.mark.parametrize("length", [192, 193, EXTERNAL_ID_MAX])
def test_reruns_of_a_long_external_id_count_on(world, length):
    """The re-run id truncates the root to fit; the next number is found among the ids
    actually made, so the second, third, ... tenth re-run each get one."""
    root = "x" * (length - 3) + "end"
    original = _failed(world, external_id=root)
    ids, last = [], original
    for i in range(11):
        new = chart_rerun(chart=original if i % 2 else last)  # the original or the last run
        ids.append(new.external_id)
        _finish(new)
        last = new
    expected = []
    for n in range(2, 13):
        suffix = f"~rerun-{n}"
        expected.append(root[:EXTERNAL_ID_MAX - len(suffix)] + suffix)
    assert ids == expected
    assert all(len(i) <= EXTERNAL_ID_MAX for i in ids)


def test_a_rerun_id_taken_by_the_producer_is_skipped(world):
    root = "y" * EXTERNAL_ID_MAX
    original = _failed(world, external_id=root)
    make_chart(world["acme"], world["wf"], external_id=root[:192] + "~rerun-2")  # submitted by the producer
    assert chart_rerun(chart=original).external_id == root[:192] + "~rerun-3"


def test_a_search_for_a_long_original_finds_its_reruns(world, client):
    root = "z" * EXTERNAL_ID_MAX
    original = _failed(world, external_id=root)
    second = chart_rerun(chart=original)
    _finish(second)
    third = chart_rerun(chart=second)
    other = _failed(world, external_id="z" * 199)  # shares the truncated prefix, another content
    assert [c.pk for c in history.search(root)] == [third.pk, second.pk, original.pk]
    assert other.pk not in [c.pk for c in history.search(root)]
    client.force_login(make_user("root", superuser=True))
    text = client.get("/dashboard/search/", {"q": root}).content.decode()
    assert all(f'data-chart-id="{c.pk}"' in text for c in (original, second, third))
