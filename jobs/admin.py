"""Admin for background jobs: upload a file to import, watch its progress and row
errors; see every webhook delivery and retry failed ones. Thin: writes go through
:mod:`jobs.services` and :mod:`jobs.webhooks`."""
from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.http import HttpResponseRedirect
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join

from jobs import services, webhooks
from jobs.importing import COLUMNS
from jobs.models import DeliveryStatus, ImportJob, WebhookDelivery


def _rq_link(job_id: str) -> str:
    if not job_id:
        return "—"
    try:
        url = reverse("django_rq:job_detail", args=[0, job_id])
    except NoReverseMatch:
        return job_id
    return format_html('<a href="{}">{}</a>', url, job_id)


def _bar(fraction: float | None) -> str:
    if fraction is None:
        return "—"
    pct = round(fraction * 100)
    # a <progress>, never style="": the Content-Security-Policy refuses inline styles
    return format_html('<progress class="import-progress" max="100" aria-label="rows imported" value="{}">{}%</progress> {}%', pct, pct, pct)


class ImportUploadForm(forms.ModelForm):
    file = forms.FileField(
        help_text=format_html(
            "CSV with a header line ({}) or JSON (a list of objects with those keys, or "
            '<code>{{"charts": [...]}}</code>). <code>org</code> is the org\'s slug or id, <code>workflow</code> '
            "the workflow's name or id, <code>payload</code> a JSON object, <code>priority</code> true/false.",
            ", ".join(COLUMNS),
        )
    )

    class Meta:
        model = ImportJob
        fields = ["batch_size"]

    def clean_file(self):
        upload = self.cleaned_data["file"]
        limit = settings.FAIRSCHED_IMPORT_MAX_BYTES
        if upload.size > limit:
            raise ValidationError(f"{upload.size:,} bytes is over the limit of {limit:,} "
                                  "(FAIRSCHED_IMPORT_MAX_BYTES); split the file.")
        if upload.size == 0:
            raise ValidationError("The file is empty.")
        return upload


@admin.register(ImportJob)
class ImportJobAdmin(admin.ModelAdmin):
    list_display = ("id", "filename", "status", "progress_bar", "total_rows", "created_count", "existing_count",
                    "error_count", "created_by", "created_at")
    list_filter = ("status",)
    search_fields = ("filename",)
    actions = ["resume"]
    readonly_fields = ("filename", "format", "status", "progress_bar", "total_rows", "next_row", "created_count",
                       "existing_count", "error_count", "message", "row_errors", "rq_job", "created_by",
                       "created_at", "started_at", "finished_at", "batch_size", "heartbeat_at", "auto_resumes")
    fieldsets = (
        (None, {"fields": ("filename", "format", "status", "progress_bar", "message")}),
        ("Counts", {"fields": ("total_rows", "next_row", "created_count", "existing_count", "error_count")}),
        ("Row errors", {"fields": ("row_errors",)}),
        ("Job", {"fields": ("rq_job", "batch_size", "created_by", "created_at", "started_at", "heartbeat_at",
                            "finished_at", "auto_resumes")}),
    )
    change_form_template = "admin/jobs/importjob/change_form.html"

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ImportUploadForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return ((None, {"fields": ("file", "batch_size")}),)
        return self.fieldsets

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.readonly_fields

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # an import is watched, not edited; 'Resume' is an action

    def save_model(self, request, obj: ImportJob, form, change: bool) -> None:
        upload = form.cleaned_data["file"]
        created = services.import_create(  # the form checked size; the batch size is the model's validator
            filename=upload.name, data=upload.read(), batch_size=form.cleaned_data.get("batch_size"),
            user=request.user,
        )
        obj.pk = created.pk
        obj.refresh_from_db()

    def get_changeform_initial_data(self, request):
        return {"batch_size": settings.FAIRSCHED_IMPORT_BATCH}

    def response_add(self, request, obj, post_url_continue=None):
        self.message_user(request, f"Import #{obj.pk} of {obj.filename} is queued; this page shows its progress.",
                          level=messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:jobs_importjob_change", args=[obj.pk]))

    @admin.display(description="Progress")
    def progress_bar(self, obj: ImportJob) -> str:
        return _bar(obj.progress)

    @admin.display(description="rq job")
    def rq_job(self, obj: ImportJob) -> str:
        return _rq_link(obj.rq_job_id)

    @admin.display(description="Errors (row 1 is the first data row)")
    def row_errors(self, obj: ImportJob) -> str:
        if not obj.errors:
            return "—"
        return format_html(
            '<table><thead><tr><th>row</th><th>error</th></tr></thead><tbody>{}</tbody></table>',
            format_html_join("", "<tr><td>{}</td><td>{}</td></tr>",
                             ((e.get("row"), e.get("message")) for e in obj.errors)),
        )

    @admin.action(description="Resume selected imports (continue after the last imported batch)",
                  permissions=["add"])
    def resume(self, request, queryset) -> None:
        done = 0
        for job in queryset:
            try:
                services.import_resume(import_job=job)
                done += 1
            except ValidationError as exc:
                for msg in exc.messages:
                    self.message_user(request, msg, level=messages.ERROR)
        if done:
            self.message_user(request, f"Queued {done} import(s) again.", level=messages.SUCCESS)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ("id", "org", "event", "status", "attempts", "last_status_code", "short_error", "next_retry_at",
                    "created_at", "delivered_at")
    list_filter = ("status", "event", "org")
    list_select_related = ("org",)
    search_fields = ("dedupe_key", "url", "message_id")
    actions = ["retry_now"]
    readonly_fields = ("org", "event", "message_id", "dedupe_key", "url", "status", "attempts", "last_status_code",
                       "last_response", "last_error", "next_retry_at", "created_at", "last_attempt_at",
                       "delivered_at", "body", "signature_help")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return obj is None and super().has_change_permission(request, obj)  # actions only

    def get_fields(self, request, obj=None):
        return self.readonly_fields

    @admin.display(description="Last error")
    def short_error(self, obj: WebhookDelivery) -> str:
        return (obj.last_error[:60] + "…") if len(obj.last_error) > 60 else (obj.last_error or "—")

    @admin.display(description="Body (signed bytes)")
    def body(self, obj: WebhookDelivery) -> str:
        return format_html("<pre style='white-space:pre-wrap'>{}</pre>", webhooks.delivery_body(obj).decode())

    @admin.display(description="Signature")
    def signature_help(self, obj: WebhookDelivery) -> str:
        legacy = format_html(
            "; also <code>{}: sha256=&lt;hex HMAC-SHA256 of the body&gt;</code> "
            "(FAIRSCHED_WEBHOOK_LEGACY_SIGNATURE)", webhooks.SIGNATURE_HEADER,
        ) if settings.FAIRSCHED_WEBHOOK_LEGACY_SIGNATURE else ""
        return format_html(
            "Standard Webhooks: <code>webhook-id: {}</code> (every attempt), <code>webhook-timestamp</code> "
            "(the attempt's time), <code>webhook-signature: v1,&lt;base64 HMAC-SHA256 of "
            "\"id.timestamp.body\" with the org's webhook secret&gt;</code>{}",
            obj.webhook_id, legacy,
        )

    @admin.action(description="Retry selected deliveries now", permissions=["change"])
    def retry_now(self, request, queryset) -> None:
        done = 0
        for delivery in queryset.exclude(status=DeliveryStatus.SUCCEEDED):
            webhooks.webhook_delivery_retry(delivery=delivery)
            done += 1
        self.message_user(request, f"Queued {done} delivery(ies) again.", level=messages.SUCCESS)


# --- django-rq's queue pages ----------------------------------------------------------------
# django-rq serves its views twice: at /admin/rq/ (config/urls.py guards those) and inside
# the admin at /admin/django_rq/dashboard/..., which only asks for is_staff. Re-registered here
# (this app comes after django_rq, so its registration exists) with the same guard.

from django.urls import URLPattern  # noqa: E402
from django_rq.admin import QueueAdmin  # noqa: E402
from django_rq.models import Dashboard  # noqa: E402

from jobs.permissions import can_manage_rq, rq_admin_required  # noqa: E402


class GuardedQueueAdmin(QueueAdmin):
    """django-rq's queue admin for superusers and holders of ``jobs.manage_rq_queues`` only."""

    def has_module_permission(self, request) -> bool:
        return can_manage_rq(request.user)

    def has_view_permission(self, request, obj=None) -> bool:
        return can_manage_rq(request.user)

    def has_change_permission(self, request, obj=None) -> bool:
        return can_manage_rq(request.user)

    def get_urls(self):
        urls = super().get_urls()
        for pattern in urls:
            if isinstance(pattern, URLPattern):
                pattern.callback = rq_admin_required(pattern.callback)
        return urls


if admin.site.is_registered(Dashboard):
    admin.site.unregister(Dashboard)
    admin.site.register(Dashboard, GuardedQueueAdmin)
