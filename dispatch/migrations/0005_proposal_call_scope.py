"""A call id's scope is its own column (docs/rest-api.md#proposal): the execution id the caller
named, or "" when it named none, so that a call id sent without an execution id is the principal's
alone.

Every existing proposal with a call id came from the agent or workflow runtime, which always
names the execution: its scope is its execution id, and the old uniqueness carries over.
"""

from django.db import migrations, models
from django.db.models import F


def scope_existing_calls(apps, schema_editor):
    Proposal = apps.get_model("dispatch", "Proposal")
    Proposal.objects.exclude(call_id="").update(call_scope=F("execution_id"))


class Migration(migrations.Migration):

    dependencies = [
        ('dispatch', '0004_lease'),
    ]

    operations = [
        migrations.AddField(
            model_name='proposal',
            name='call_scope',
            field=models.CharField(blank=True, default='', max_length=80),
        ),
        migrations.AlterField(
            model_name='proposal',
            name='call_id',
            field=models.CharField(blank=True, default='', max_length=200),
        ),
        migrations.RunPython(scope_existing_calls, migrations.RunPython.noop),
        migrations.RemoveConstraint(
            model_name='proposal',
            name='one_proposal_per_call',
        ),
        migrations.AddConstraint(
            model_name='proposal',
            constraint=models.UniqueConstraint(condition=models.Q(('call_id', ''), _negated=True), fields=('principal', 'call_scope', 'call_id'), name='one_proposal_per_call'),
        ),
    ]
