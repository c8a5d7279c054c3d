from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from charts.forms import ChartSubmitForm
from charts.models import Chart
from charts.services import chart_submit


@login_required
@permission_required("charts.add_chart", raise_exception=True)
def chart_new(request: HttpRequest) -> HttpResponse:
    """The producer's form: submit one chart."""
    form = ChartSubmitForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        ext = (data.get("external_id") or "").strip() or None
        if ext and Chart.objects.filter(org=data["org"], external_id=ext).exists():
            form.add_error("external_id", f"{data['org'].name} already has a chart with external id {ext!r}.")
        else:
            try:
                chart = chart_submit(
                    org=data["org"], workflow=data["workflow"], payload=data["payload"],
                    external_id=ext, priority=data.get("priority", False),
                )
            except ValidationError as exc:
                for field, errors in exc.message_dict.items():
                    form.add_error(field if field in form.fields else None, errors)
            else:
                messages.success(request, f"Submitted {chart} for {chart.org.name}; it is queued.")
                return redirect("charts:new")
    return render(request, "charts/new.html", {"form": form})
