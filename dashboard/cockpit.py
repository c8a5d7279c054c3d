"""The cockpit's views of what has happened: history, search, a chart's page,
failures, and re-run. Server-rendered (no script needed), linked from the dashboard.

Staff with the dashboard's view permission see everything; an org's members see
their own charts' pages (position, ETA, timeline) without the operators' names.
"""
from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from charts import services as chart_services
from charts.models import FINAL_STATES, Chart, ChartState
from dashboard import history, selectors
from dashboard.permissions import can_view_dashboard
from dashboard.views import BadQuery, _text_arg, staff_required
from orgs.models import Org, Workflow


class HistoryFilter(forms.Form):
    """The history's filters. A bad value is shown next to its field and named above the
    list, and only that filter is left out: the others still apply (one typo must not
    silently show every org)."""

    org = forms.ModelChoiceField(queryset=Org.objects.order_by("name"), required=False, empty_label="all orgs")
    workflow = forms.ModelChoiceField(queryset=Workflow.objects.order_by("name"), required=False,
                                      empty_label="all workflows")
    state = forms.ChoiceField(choices=[("", "finished, failed or cancelled")]
                              + [(s.value, s.label) for s in FINAL_STATES], required=False)
    since = forms.DateTimeField(required=False, label="finished from",
                                widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
                                input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"])
    until = forms.DateTimeField(required=False, label="until",
                                widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
                                input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"])

    def _in_range(self, name: str):
        value = self.cleaned_data.get(name)
        if value is not None:
            try:
                history.in_utc(value)
            except OverflowError:  # 9999-12-31 in a zone west of UTC: the database adapter overflowed
                raise ValidationError(f"{name}: out of range (years 1 to 9999 in UTC).") from None
        return value

    def clean_since(self):
        return self._in_range("since")

    def clean_until(self):
        return self._in_range("until")

    def clean(self):
        data = super().clean()
        if data.get("since") and data.get("until") and data["since"] >= data["until"]:
            self.add_error("until", "until: must be after 'finished from'.")
        return data

    def usable(self) -> tuple[dict, list[str]]:
        """``(filters, messages)``: the filters whose value is good, and one message per bad
        one, naming its query parameter and saying it was left out."""
        if not self.is_bound:
            return {}, []
        self.is_valid()
        filters = {k: v for k, v in self.cleaned_data.items() if k not in self.errors and v not in (None, "")}
        said = []
        for name, errors in self.errors.items():
            for error in errors:
                text = error if error.startswith(f"{name}: ") else f"{name}: {error}"
                said.append(f"{text} Not filtered by it; the other filters are applied.")
        return filters, said


def _can_rerun(user) -> bool:
    return user.has_perm("charts.add_chart") and can_view_dashboard(user)


@never_cache
@staff_required
def history_view(request: HttpRequest) -> HttpResponse:
    form = HistoryFilter(request.GET or None)
    page = {"rows": [], "next": None}
    filters, problems = form.usable()
    after, bad_cursor = None, False
    if request.GET.get("after"):
        try:
            after = history.Cursor.parse(request.GET["after"])
        except ValueError as exc:
            problems.append(str(exc))
            bad_cursor = True
    if not bad_cursor:  # a bad cursor shows no page (which one?); a bad filter only leaves itself out
        page = history.history_page(after=after, **filters)
    error = " ".join(problems)
    query = request.GET.copy()
    query.pop("after", None)
    newest = query.urlencode()
    if page["next"]:
        query["after"] = page["next"]
    return render(request, "dashboard/history.html", {
        "form": form, "rows": page["rows"], "error": error, "first_page": after is None,
        "next_url": f"?{query.urlencode()}" if page["next"] else None,
        "newest_url": f"?{newest}",
        "can_rerun": _can_rerun(request.user), "rerunnable": (ChartState.FAILED, ChartState.CANCELLED),
    })


@never_cache
@staff_required
def search_view(request: HttpRequest) -> HttpResponse:
    """A NUL character or a query longer than any external id is refused (400) naming ``q``,
    as ``status.json`` refuses ``external_id`` (PostgreSQL cannot even compare a NUL)."""
    try:
        q = (_text_arg(request, "q") or "").strip()
    except BadQuery as exc:
        return render(request, "dashboard/search.html", {"q": "", "rows": [], "error": str(exc)}, status=400)
    rows = history.search(q)
    if len(rows) == 1:
        return redirect("dashboard:chart", pk=rows[0].pk)
    return render(request, "dashboard/search.html", {"q": q, "rows": rows})


def _chart_for(user, pk: int) -> tuple[Chart, bool]:
    """The chart and whether the user is staff; 404 for a chart the user may not see."""
    chart = Chart.objects.select_related("org", "workflow", "rerun_of").filter(pk=pk).first()
    if chart is None:
        raise Http404("No such chart.")
    if can_view_dashboard(user):
        return chart, True
    if chart.org.members.filter(pk=user.pk).exists():
        return chart, False
    raise Http404("No such chart.")


@never_cache
@login_required
def chart_view(request: HttpRequest, pk: int) -> HttpResponse:
    chart, staff = _chart_for(request.user, pk)
    entries = history.chart_entries(chart) if staff else []
    return render(request, "dashboard/chart.html", {
        "chart": chart, "staff": staff, "entries": entries,
        "timeline": history.chart_timeline(chart, entries),
        "prediction": history.chart_prediction(chart),
        "temporal_url": selectors.temporal_url(chart.temporal_workflow_id) if chart.dispatched_at or chart.temporal_run_id else "",
        "reruns": list(chart.reruns.order_by("id")),
        "can_rerun": staff and _can_rerun(request.user) and chart.state in chart_services.RERUNNABLE,
        "is_final": chart.state in FINAL_STATES,
    })


@staff_required
@require_POST
def rerun_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Re-run a failed or cancelled chart (needs "add chart"), then show the new one; refused
    while a run of the same content is queued or running, then show that one."""
    original = get_object_or_404(Chart, pk=pk)
    try:
        new = chart_services.chart_rerun(chart=original, actor=request.user)
    except chart_services.RerunInFlight as exc:
        # A double click, a second tab or another operator: nothing was made; show the run in flight.
        messages.warning(request, exc.messages[0])
        return redirect("dashboard:chart", pk=exc.live.pk)
    except ValidationError as exc:
        for msgs in exc.message_dict.values():
            for msg in msgs:
                messages.error(request, msg)
        return redirect("dashboard:chart", pk=original.pk)
    messages.success(request, format_html('Re-ran chart #{} as <a href="{}">chart #{}</a>{}.', original.pk,
                                          reverse("dashboard:chart", args=[new.pk]), new.pk,
                                          f" ({new.external_id})" if new.external_id else ""))
    return redirect("dashboard:chart", pk=new.pk)


@never_cache
@staff_required
def failures_view(request: HttpRequest) -> HttpResponse:
    return render(request, "dashboard/failures.html", {**history.failures(),
                                                       "can_rerun": _can_rerun(request.user)})
