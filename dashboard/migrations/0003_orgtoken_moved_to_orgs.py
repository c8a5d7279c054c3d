"""``OrgToken`` is the orgs app's now (orgs/0009_orgtoken): the dashboard's state forgets it;
its table, ``dashboard_orgtoken``, stays with every row. The token's content type follows it
(``dashboard.orgtoken`` becomes ``orgs.orgtoken``), so the permissions given on tokens and
the admin's history of them are kept."""

from django.db import migrations


def _move_content_type(apps, schema_editor, old: str, new: str) -> None:
    ContentType = apps.get_model('contenttypes', 'ContentType')
    db = schema_editor.connection.alias
    if not ContentType.objects.using(db).filter(app_label=new, model='orgtoken').exists():
        ContentType.objects.using(db).filter(app_label=old, model='orgtoken').update(app_label=new)


def forwards(apps, schema_editor):
    _move_content_type(apps, schema_editor, 'dashboard', 'orgs')


def backwards(apps, schema_editor):
    _move_content_type(apps, schema_editor, 'orgs', 'dashboard')


class Migration(migrations.Migration):

    dependencies = [
        ('dashboard', '0002_orgtoken_scope'),
        ('orgs', '0009_orgtoken'),
        ('contenttypes', '0002_remove_content_type_name'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='OrgToken')],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
