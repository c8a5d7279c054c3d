"""ETA accuracy measured in production: ``dashboard/accuracy.py``, ``/dashboard/accuracy.json``, the org page."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.test import Client

from charts.models import Chart, ChartState
from dashboard.accuracy import accuracy, figures
from tests.factories import make_chart, make_user

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)


def _finished(org, wf, *, n: int, first_err: float, dispatch_err: float | None, state=ChartState.SUCCEEDED):
    """``n`` finished charts whose first ETA erred by ``first_err`` s and dispatch ETA by ``dispatch_err`` s,
    each error growing by 10 s per chart (so medians and p90s differ)."""
    out = []
    for i in range(n):
        fin = T0 + timedelta(minutes=i)
        c = make_chart(org, wf, created_at=T0 - timedelta(hours=1), state=state, finished_at=fin,
                       started_at=fin - timedelta(minutes=5),
                       eta_first_at=fin + timedelta(seconds=first_err + 10 * i),
                       eta_dispatch_at=None if dispatch_err is None else fin + timedelta(seconds=dispatch_err + 10 * i))
        out.append(c)
    return out


def test_figures_are_median_p90_of_absolute_error_and_mean_bias():
    f = figures([-100.0, 10.0, 20.0, 30.0, -40.0, 50.0, 60.0, 70.0, 80.0, 900.0])
    assert f == {"n": 10, "median_abs_s": 50.0, "p90_abs_s": 100.0, "bias_s": 108.0}
    assert figures([]) == {"n": 0, "median_abs_s": None, "p90_abs_s": None, "bias_s": None}


def test_accuracy_overall_and_per_org(two_orgs):
    a, b, wf = two_orgs["a"], two_orgs["b"], two_orgs["wf"]
    _finished(a, wf, n=10, first_err=-600, dispatch_err=-60)   # optimistic
    _finished(b, wf, n=5, first_err=300, dispatch_err=None)    # pessimistic, no dispatch ETA
    _finished(b, wf, n=3, first_err=0, dispatch_err=0, state=ChartState.FAILED)  # not counted
    make_chart(a, wf)  # still queued: not counted
    acc = accuracy(last=500)
    assert acc["n"] == 15
    ra, rb = acc["orgs"][str(a.pk)], acc["orgs"][str(b.pk)]
    assert ra["name"] == "Acme" and ra["first"]["n"] == 10
    assert ra["first"]["bias_s"] == pytest.approx(-600 + 45)  # errors -600, -590, ..., -510
    assert ra["first"]["median_abs_s"] == 550.0 and ra["first"]["p90_abs_s"] == 590.0  # nearest rank
    assert ra["dispatch"]["median_abs_s"] == 20.0  # -60 .. +30: |.| sorted 0 10 10 20 20 30 ...
    assert rb["first"]["bias_s"] == pytest.approx(320.0) and rb["dispatch"]["n"] == 0
    assert acc["first"]["n"] == 15 and acc["dispatch"]["n"] == 10
    assert len(acc["points"]) == 15 and acc["points"][-1]["actual"] > acc["points"][0]["actual"]


def test_accuracy_covers_only_the_last_n(two_orgs):
    a, wf = two_orgs["a"], two_orgs["wf"]
    _finished(a, wf, n=10, first_err=0, dispatch_err=0)
    acc = accuracy(last=4)
    assert acc["n"] == 4 and acc["first"]["median_abs_s"] == 70.0  # the latest four: 60 70 80 90 (nearest rank)


def test_accuracy_json_is_staff_only(two_orgs, viewer):
    _finished(two_orgs["a"], two_orgs["wf"], n=3, first_err=-120, dispatch_err=-30)
    anon = Client().get("/dashboard/accuracy.json")
    assert anon.status_code == 302
    member = Client()
    member.force_login(two_orgs["alice"])
    assert member.get("/dashboard/accuracy.json").status_code == 302
    staff = Client()
    staff.force_login(viewer)
    r = staff.get("/dashboard/accuracy.json?last=2")
    assert r.status_code == 200 and "no-store" in r["Cache-Control"]
    data = r.json()
    assert data["n"] == 2 and data["last"] == 2
    assert data["first"]["bias_s"] == pytest.approx(-105.0)  # the latest two: -110, -100
    assert data == accuracy(last=2)


def test_accuracy_json_ignores_a_bad_last(two_orgs, viewer):
    staff = Client()
    staff.force_login(viewer)
    assert staff.get("/dashboard/accuracy.json?last=abc").json()["last"] == 500
    assert staff.get("/dashboard/accuracy.json?last=999999").json()["last"] == 5000


def test_org_page_shows_its_own_accuracy_only(two_orgs, redis_url):
    _finished(two_orgs["a"], two_orgs["wf"], n=4, first_err=-600, dispatch_err=-120)
    _finished(two_orgs["b"], two_orgs["wf"], n=6, first_err=3600 * 2, dispatch_err=None)
    c = Client()
    c.force_login(two_orgs["alice"])
    html = c.get("/orgs/acme/").content.decode()
    table = html[html.index('id="acc-org"'):html.index("</table>", html.index('id="acc-org"'))]
    first = table[table.index('data-kind="first"'):table.index("</tr>", table.index('data-kind="first"'))]
    # errors -600, -590, -580, -570: median 580 s (nearest rank), p90 600 s, bias -585 s
    assert [c.split(">")[-1] for c in first.split("</td>")[:-1]] == ["first ETA", "4", "9.7 min", "10.0 min",
                                                                    "−9.8 min"]
    assert "2.0 h" not in table  # Beta's figures stay on Beta's page
    assert "your last 4 finished charts" in html
