from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.html import format_html

from charts.forms import ChartSubmitForm
from charts.models import Chart
from charts.services import chart_submit
from common.middleware import keeps_oversized_form


@keeps_oversized_form
@login_required
@permission_required("charts.add_chart", raise_exception=True)
def chart_new(request: HttpRequest) -> HttpResponse:
    """The producer's form: submit one chart.

    Idempotent like :func:`chart_submit`: the same org, external id, workflow and
    payload again is the chart already submitted ("already submitted, here it is");
    the same external id with different content is refused, naming ``external_id``.
    A submission too large to read is shown again with what could be kept, and a
    message on the field that was too large.
    """
    form = ChartSubmitForm(request.POST or None, user=request.user)
    oversized = getattr(request, "oversized_fields", None)
    if request.method == "POST" and oversized is not None:
        form.is_valid()
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        for name in oversized or ["__all__"]:
            form.add_error(name if name in form.fields else None,
                           f"Too large: the request was more than {limit:,} bytes, so this field was dropped "
                           f"(a payload may have at most {settings.FAIRSCHED_MAX_PAYLOAD_BYTES:,} bytes of JSON).")
    elif request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        ext = (data.get("external_id") or "").strip() or None
        before = Chart.objects.filter(org=data["org"], external_id=ext).values_list("pk", flat=True).first() if ext else None
        try:
            chart = chart_submit(
                org=data["org"], workflow=data["workflow"], payload=data["payload"],
                external_id=ext, priority=data.get("priority", False), due_at=data.get("due_at") or None,
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            _say_submitted(request, chart, again=chart.pk == before)
            return redirect("charts:new")
    return render(request, "charts/new.html", {"form": form})


def _say_submitted(request: HttpRequest, chart: Chart, *, again: bool) -> None:
    """The success message: what happened, a link to the chart's status (its position and
    ETA), and a warning when its org is held (the chart will not start until released)."""
    name = chart.external_id or f"chart #{chart.pk}"
    link = reverse("dashboard:chart", args=[chart.pk])
    if again:
        messages.info(request, format_html(
            'Already submitted, here it is: <a href="{}">{} for {}</a> (chart #{}, {}): see its position and ETA.',
            link, name, chart.org.name, chart.pk, chart.state))
    else:
        messages.success(request, format_html(
            'Submitted <a href="{}">{} for {}</a> (chart #{}); it is queued: see its position and ETA.',
            link, name, chart.org.name, chart.pk))
    if chart.org.is_held and chart.state == "queued":
        messages.warning(request, f"{chart.org.name} is held: {name} will not start until the org is released.")
