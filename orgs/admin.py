from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Q
from django.utils.html import format_html

from common.states import ChartState
from control.admin import audit_table
from control.models import AuditEntry
from orgs import services
from orgs.models import Org, OrgPoolLimit, OrgToken, Workflow, WorkflowCost


class WorkflowCostFormSet(forms.BaseInlineFormSet):
    """Each row's inputs named for a screen reader: a tabular inline labels its columns only, so
    the workflow select, the cost and the delete box had no accessible name (axe: label, select-name)."""

    def add_fields(self, form, index) -> None:
        super().add_fields(form, index)
        row = form.instance.workflow.name if form.instance.pk else "new row"
        names = {"workflow": f"workflow ({row})", "cost": f"cost ({row})", "pools": f"pools ({row})",
                 "DELETE": f"delete the cost of {row}"}
        for field, name in names.items():
            if field in form.fields:
                widget = form.fields[field].widget
                widget = getattr(widget, "widget", widget)  # the admin's related-object wrapper: its select
                widget.attrs = {**widget.attrs, "aria-label": name}


class WorkflowCostInline(admin.TabularInline):
    model = WorkflowCost
    formset = WorkflowCostFormSet
    extra = 0
    fields = ("workflow", "cost", "pools")


def _report(modeladmin: admin.ModelAdmin, request, exc: ValidationError) -> None:
    for msgs in exc.message_dict.values():
        for msg in msgs:
            modeladmin.message_user(request, msg, level=messages.ERROR)


def _labelled(form_class: type, field: str, label) -> type:
    """The change list's form with an accessible name on its editable ``field``: the list shows
    the column header only, so a screen reader had "spin button" and nothing else (axe: label)."""

    class Labelled(form_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if field in self.fields and self.instance.pk:
                widget = self.fields[field].widget
                widget.attrs = {**widget.attrs, "aria-label": label(self.instance)}

    return Labelled


@admin.register(Org)
class OrgAdmin(admin.ModelAdmin):
    list_display = ("name", "weight", "held_badge", "queued_count", "running_count", "max_queued", "slug")
    list_editable = ("weight",)
    search_fields = ("name", "slug")
    filter_horizontal = ("members",)
    readonly_fields = ("created_at", "updated_at", "weight_before_hold", "activity")
    fieldsets = (
        (None, {"fields": ("name", "slug", "weight", "weight_before_hold", "turnaround", "members")}),
        ("Webhook", {"fields": ("webhook_url", "webhook_secret", "webhook_clear_margin_s"), "classes": ("collapse",)}),
        ("Producer API", {"fields": ("max_queued",),
                          "description": "Back-pressure on the producer API (/api/v1/): beyond this many queued "
                                         "charts a submission is answered 429 naming the cap. Each API key is "
                                         "also rate-limited (see Org API tokens)."}),
        ("Timestamps", {"fields": ("created_at", "updated_at")}),
        ("Activity", {"fields": ("activity",)}),
    )
    inlines = [WorkflowCostInline]
    actions = ["hold_orgs", "release_orgs"]

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "webhook_url":
            kwargs["assume_scheme"] = "https"
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def get_changelist_form(self, request, **kwargs):
        return _labelled(super().get_changelist_form(request, **kwargs), "weight", lambda org: f"weight of {org.name}")

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(
            n_queued=Count("charts", filter=Q(charts__state=ChartState.QUEUED)),
            n_running=Count("charts", filter=Q(charts__state=ChartState.RUNNING)),
        )

    @admin.display(description="Operator actions (last 50)")
    def activity(self, obj: Org) -> str:
        if obj.pk is None:
            return "—"
        return audit_table(AuditEntry.objects.filter(org=obj).order_by("-at", "-id")[:50])

    @admin.display(description="Held", boolean=False)
    def held_badge(self, obj: Org) -> str:
        if obj.is_held:
            # a class, never style="": the Content-Security-Policy refuses inline styles (admin_live.css)
            return format_html('<span class="held-badge">{}</span>', "held")
        return "—"

    @admin.display(description="Queued", ordering="n_queued")
    def queued_count(self, obj: Org) -> int:
        return obj.n_queued

    @admin.display(description="Running", ordering="n_running")
    def running_count(self, obj: Org) -> int:
        return obj.n_running

    def save_model(self, request, obj: Org, form, change: bool) -> None:
        """A change (the form or the list's weight) is one ``org_update``: validated, audited
        and notified there, members included; a new org is announced like org_create
        announces one (its members are saved after, by save_related)."""
        if not change:
            super().save_model(request, obj, form, change)
            services.org_announce(org=obj, actor=request.user)
            return
        changes = {f: form.cleaned_data[f] for f in form.changed_data if f in services.UPDATE_FIELDS}
        try:
            services.org_update(org=obj.pk, actor=request.user, **changes)
        except ValidationError as exc:  # the form checked the same rules: a race (a name taken meanwhile)
            _report(self, request, exc)
        obj.refresh_from_db()

    def save_related(self, request, form, formsets, change: bool) -> None:
        """On a change the members were set by ``org_update`` (recorded there): the form's
        ``save_m2m`` would set them again, unrecorded, even after a refused update."""
        if not change:
            return super().save_related(request, form, formsets, change)
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)

    def save_formset(self, request, form, formset, change: bool) -> None:
        if formset.model is not WorkflowCost:
            return super().save_formset(request, form, formset, change)
        # The admin's change message reads these three lists.
        formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
        for f in formset.forms:
            deleting = formset.can_delete and formset._should_delete_form(f)
            if not f.has_changed() and not deleting:
                continue
            inst = f.instance
            if deleting:
                if inst.pk:
                    services.workflow_cost_delete(org=form.instance, workflow=inst.workflow_id, actor=request.user)
                    formset.deleted_objects.append(inst)
                continue
            if inst.pk and "workflow" in f.changed_data:
                old_wf = WorkflowCost.objects.values_list("workflow_id", flat=True).get(pk=inst.pk)
                services.workflow_cost_delete(org=form.instance, workflow=old_wf, actor=request.user)
            row = services.workflow_cost_set(
                org=form.instance, workflow=f.cleaned_data["workflow"], cost=f.cleaned_data["cost"],
                pools=f.cleaned_data.get("pools") or None, actor=request.user,
            )
            if inst.pk:
                formset.changed_objects.append((row, f.changed_data))
            else:
                formset.new_objects.append(row)

    def _apply(self, request, queryset, service, verb: str) -> None:
        done = 0
        for org in queryset:
            try:
                service(org=org, actor=request.user)
                done += 1
            except ValidationError as exc:
                _report(self, request, exc)
        if done:
            self.message_user(request, f"{verb} {done} org(s).", level=messages.SUCCESS)

    @admin.action(description="Hold selected orgs (weight 0: charts stay visible, never dispatch)", permissions=["change"])
    def hold_orgs(self, request, queryset) -> None:
        self._apply(request, queryset, services.org_hold, "Held")

    @admin.action(description="Release selected orgs (restore their weight)", permissions=["change"])
    def release_orgs(self, request, queryset) -> None:
        self._apply(request, queryset, services.org_release, "Released")


@admin.register(Workflow)
class WorkflowAdmin(admin.ModelAdmin):
    list_display = ("name", "temporal_type", "execution_timeout_s", "expected_duration_s", "description")
    search_fields = ("name", "temporal_type")

    def save_model(self, request, obj: Workflow, form, change: bool) -> None:
        """A changed expected duration goes through the service (audited, and the scheduler
        re-reads its estimates at once); the other fields are saved as the admin saves them."""
        if not change or "expected_duration_s" not in form.changed_data:
            return super().save_model(request, obj, form, change)
        seconds = obj.expected_duration_s
        obj.expected_duration_s = form.initial.get("expected_duration_s")
        super().save_model(request, obj, form, change)
        services.workflow_expected_set(workflow=obj, seconds=seconds, actor=request.user)
        obj.expected_duration_s = seconds


@admin.register(WorkflowCost)
class WorkflowCostAdmin(admin.ModelAdmin):
    list_display = ("org", "workflow", "cost", "pools")
    list_editable = ("cost",)
    list_filter = ("org", "workflow")

    def get_changelist_form(self, request, **kwargs):
        return _labelled(super().get_changelist_form(request, **kwargs), "cost",
                         lambda row: f"cost of {row.workflow.name} for {row.org.name}")

    def save_model(self, request, obj: WorkflowCost, form, change: bool) -> None:
        if change and ("workflow" in form.changed_data or "org" in form.changed_data):
            old = WorkflowCost.objects.get(pk=obj.pk)
            services.workflow_cost_delete(org=old.org_id, workflow=old.workflow_id, actor=request.user)
        row = services.workflow_cost_set(org=obj.org_id, workflow=obj.workflow_id, cost=obj.cost,
                                         pools=obj.pools or None, actor=request.user)
        obj.pk = row.pk

    def delete_model(self, request, obj: WorkflowCost) -> None:
        services.workflow_cost_delete(org=obj.org_id, workflow=obj.workflow_id, actor=request.user)

    def delete_queryset(self, request, queryset) -> None:
        for obj in queryset:
            services.workflow_cost_delete(org=obj.org_id, workflow=obj.workflow_id, actor=request.user)


@admin.register(OrgPoolLimit)
class OrgPoolLimitAdmin(admin.ModelAdmin):
    """An org's ceiling and guaranteed minimum in a pool (docs/scheduling.md, "Pools"):
    written by the service (audited, applied at once; running charts are never stopped)."""

    list_display = ("org", "pool", "max", "min")
    list_filter = ("pool",)
    fields = ("org", "pool", "max", "min")

    def save_model(self, request, obj: OrgPoolLimit, form, change: bool) -> None:
        if change and ("org" in form.changed_data or "pool" in form.changed_data):
            old = OrgPoolLimit.objects.get(pk=obj.pk)
            services.org_pool_limit_set(org=old.org_id, pool=old.pool, actor=request.user)
        row = services.org_pool_limit_set(org=obj.org_id, pool=obj.pool, max=obj.max, min=obj.min, actor=request.user)
        if row is not None:
            obj.pk = row.pk

    def delete_model(self, request, obj: OrgPoolLimit) -> None:
        services.org_pool_limit_set(org=obj.org_id, pool=obj.pool, actor=request.user)

    def delete_queryset(self, request, queryset) -> None:
        for obj in queryset:
            services.org_pool_limit_set(org=obj.org_id, pool=obj.pool, actor=request.user)


@admin.register(OrgToken)
class OrgTokenAdmin(admin.ModelAdmin):
    """API keys for /orgs/<slug>/status.json and the producer API (/api/v1/). The key is
    shown once, when created; its scope says what it may do; the rate limit applies to each key."""

    list_display = ("org", "name", "scope", "prefix", "created_at", "last_used_at", "revoked", "rate_limit")
    list_filter = ("revoked", "scope", "org")
    search_fields = ("name", "prefix", "org__name")
    actions = ["revoke"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("org", "name", "scope")
        return ("org", "name", "scope", "prefix", "created_by", "created_at", "last_used_at", "revoked", "rate_limit")

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return ("org", "scope", "prefix", "created_by", "created_at", "last_used_at", "rate_limit")

    @admin.display(description="API rate limit")
    def rate_limit(self, obj: OrgToken | None = None) -> str:
        """The producer API's limit per key (FAIRSCHED_API_RATE, FAIRSCHED_API_BURST)."""
        rate, burst = settings.FAIRSCHED_API_RATE, settings.FAIRSCHED_API_BURST
        if rate <= 0:
            return "none (FAIRSCHED_API_RATE=0)"
        return f"{rate:g} requests/s, bursts of {burst} (FAIRSCHED_API_RATE, FAIRSCHED_API_BURST)"

    def save_model(self, request, obj: OrgToken, form, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        token, raw = OrgToken.issue(org=obj.org, name=obj.name, created_by=request.user, scope=obj.scope)
        obj.pk = token.pk
        obj.refresh_from_db()
        self.message_user(request, f"Token for {obj.org}: {raw} (copy it now; it is not shown again).",
                          level=messages.WARNING)

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request, queryset) -> None:
        n = queryset.update(revoked=True)
        self.message_user(request, f"Revoked {n} token(s).", level=messages.SUCCESS)
