from __future__ import annotations

import json

from django import forms
from django.core.exceptions import ValidationError

from orgs.models import Org, Workflow


class ChartSubmitForm(forms.Form):
    org = forms.ModelChoiceField(queryset=Org.objects.all())
    workflow = forms.ModelChoiceField(queryset=Workflow.objects.all())
    external_id = forms.CharField(max_length=200, required=False, help_text="Your own id for this chart (optional).")
    payload = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6}), required=False, initial="{}",
        help_text='JSON object passed to the workflow, e.g. {"seconds": 30}.',
    )
    priority = forms.BooleanField(required=False, help_text="Put it in the high-priority tier.")

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        if user is not None and not user.is_superuser and not user.is_staff:
            self.fields["org"].queryset = user.orgs.all()
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
