"""A database migrated with no chart in it never had a legacy chart: no workflow of its ever
ran as ``chart-<pk>``, so it gets no legacy cut (``legacy_below`` 1), and every chart,
the first included, runs as ``chart-<deployment>-<pk>`` (``control/deployment.py``).

The deployment's name is not chosen here: the row is written with no name, and the first
process that needs it names it (``FAIRSCHED_DEPLOYMENT``, or a generated one), as on any
database. A database that already has charts, or a deployment row, is left as it was: its
cut is fixed by the first scheduler of this version to lead."""
from django.db import migrations


def no_legacy_cut_on_a_new_database(apps, schema_editor) -> None:
    Chart = apps.get_model("charts", "Chart")
    Deployment = apps.get_model("fairsched", "Deployment")
    using = schema_editor.connection.alias
    if not Deployment.objects.using(using).exists() and not Chart.objects.using(using).exists():
        Deployment.objects.using(using).create(pk=1, name="", legacy_below=1)


class Migration(migrations.Migration):

    dependencies = [
        ("charts", "0013_chart_due_late_at"),
        ("fairsched", "0010_round_state_guard_holds"),
    ]

    operations = [
        migrations.RunPython(no_legacy_cut_on_a_new_database, migrations.RunPython.noop, elidable=True),
    ]
