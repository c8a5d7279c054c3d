from __future__ import annotations

import json

from django import forms
from django.core.exceptions import ValidationError

from orgs.models import Org, Workflow


class OrgChoice(forms.ModelChoiceField):
    """Org choices say when an org is held, before the producer submits to it."""

    def label_from_instance(self, obj: Org) -> str:
        return f"{obj.name} (held: charts will not start until it is released)" if obj.is_held else obj.name


class ChartSubmitForm(forms.Form):
    org = OrgChoice(queryset=Org.objects.order_by("name"))
    workflow = forms.ModelChoiceField(queryset=Workflow.objects.all())
    external_id = forms.CharField(
        max_length=200, required=False,
        help_text="Your own id for this chart (optional). Submitting the same id, workflow and payload again "
                  "returns the chart already submitted; the same id with different content is refused.")
    payload = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6}), required=False, initial="{}",
        help_text='JSON object passed to the workflow, e.g. {"seconds": 30}.',
    )
    priority = forms.BooleanField(required=False, help_text="Put it in the high-priority tier.")
    due_at = forms.CharField(
        required=False, max_length=64, label="Due at",
        help_text="When it is due (ISO 8601, e.g. 2026-05-01T17:00:00Z; optional). Empty: its org's turnaround "
                  "after now, if the org has one.")

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        if user is not None and not user.is_superuser and not user.is_staff:
            self.fields["org"].queryset = user.orgs.order_by("name")
        if not (user and user.has_perm("charts.change_chart")):
            del self.fields["priority"]

    def clean_payload(self) -> dict:
        raw = self.cleaned_data.get("payload") or "{}"
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise ValidationError(f"Payload is not valid JSON: {exc}.") from None
        if not isinstance(value, dict):
            raise ValidationError("Payload must be a JSON object, like {\"seconds\": 30}.")
        return value
