"""A stable Standard Webhooks ``webhook-id`` per delivery (issue 21, item 11).

New deliveries get a random ``msg_<hex>``. Existing ones get ``msg_legacy_<pk>`` in one
UPDATE (no row-by-row pass over a large table): unique, and the same on every attempt
of a delivery still being retried. The column is added without its callable default
first: Django would call it once and give every existing row the same id.
"""
from django.db import migrations, models
from django.db.models import CharField, Value
from django.db.models.functions import Cast, Concat

import jobs.models


def fill_existing(apps, schema_editor):
    WebhookDelivery = apps.get_model("jobs", "WebhookDelivery")
    WebhookDelivery.objects.filter(message_id__isnull=True).update(
        message_id=Concat(Value("msg_legacy_"), Cast("id", output_field=CharField()))
    )


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0005_sweep_cursor_after_id'),
    ]

    operations = [
        migrations.AddField(
            model_name='webhookdelivery',
            name='message_id',
            field=models.CharField(editable=False, max_length=64, null=True, unique=True,
                                   help_text='The webhook-id header: the same on every attempt (receivers dedupe on it).'),
        ),
        migrations.RunPython(fill_existing, migrations.RunPython.noop),
        # The default is Python's only: no table rebuild (SQLite) for it.
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.AlterField(
                model_name='webhookdelivery',
                name='message_id',
                field=models.CharField(default=jobs.models.new_message_id, editable=False, max_length=64, null=True,
                                       unique=True,
                                       help_text='The webhook-id header: the same on every attempt (receivers dedupe on it).'),
            ),
        ]),
    ]
