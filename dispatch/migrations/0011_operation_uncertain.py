# Sticky uncertainty (docs/design.md#outcomes): an operation remembers that an attempt may have had
# its effect.

from django.db import migrations, models


def mark_uncertain(apps, schema_editor):
    """Operations already unknown, or with an attempt that ended uncertain, are uncertain."""
    Operation = apps.get_model("dispatch", "Operation")
    Attempt = apps.get_model("dispatch", "Attempt")
    uncertain = Attempt.objects.filter(outcome="uncertain").values("operation_id")
    Operation.objects.filter(models.Q(state="unknown") | models.Q(id__in=uncertain)).update(
        uncertain=True)


class Migration(migrations.Migration):

    dependencies = [
        ('dispatch', '0010_principal_subagent'),
    ]

    operations = [
        migrations.AddField(
            model_name='operation',
            name='uncertain',
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(mark_uncertain, migrations.RunPython.noop),
    ]
