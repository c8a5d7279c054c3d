"""The org API token (``OrgToken``) becomes the orgs app's: state only. Its table stays
``dashboard_orgtoken`` (``Meta.db_table``), so no row moves and every key keeps working;
dashboard/0003_orgtoken_moved_to_orgs removes it from the dashboard's state."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('orgs', '0008_workflow_expected_duration'),
        ('dashboard', '0002_orgtoken_scope'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='OrgToken',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(help_text="What uses it, e.g. 'billing system'.", max_length=200)),
                        ('key_hash', models.CharField(editable=False, max_length=64, unique=True)),
                        ('prefix', models.CharField(editable=False, help_text="The token's first characters, to tell tokens apart.", max_length=12)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('last_used_at', models.DateTimeField(blank=True, editable=False, null=True)),
                        ('revoked', models.BooleanField(default=False)),
                        ('scope', models.CharField(choices=[('read', "read: status.json and the API's reads"), ('submit', 'submit: also submit and cancel charts through the API (includes read)')], default='read', help_text="read: status.json and the API's reads; submit: also submit and cancel charts through the API.", max_length=16)),
                        ('created_by', models.ForeignKey(blank=True, editable=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('org', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='api_tokens', to='orgs.org')),
                    ],
                    options={
                        'verbose_name': 'org API token',
                        'db_table': 'dashboard_orgtoken',
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
