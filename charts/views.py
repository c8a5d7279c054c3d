from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from charts.forms import ChartSubmitForm
from charts.models import Chart
from charts.services import chart_submit
from fairsched.middleware import keeps_oversized_form


@keeps_oversized_form
@login_required
@permission_required("charts.add_chart", raise_exception=True)
def chart_new(request: HttpRequest) -> HttpResponse:
    """The producer's form: submit one chart. A submission too large to read is shown again
    with what could be kept, and a message on the field that was too large."""
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
