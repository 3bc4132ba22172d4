"""A delegated step's sub-agent is marked (review finding A5): the principals that delegated
steps created before this migration are marked too."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models


def mark_existing_subagents(apps: Any, schema_editor: Any) -> None:
    principal = apps.get_model("dispatch", "Principal")
    delegation = apps.get_model("dispatch", "Delegation")
    principal.objects.filter(id__in=delegation.objects.values("principal_id")).update(
        subagent=True)


class Migration(migrations.Migration):
    dependencies = [
        ("dispatch", "0009_delegation"),
    ]

    operations = [
        migrations.AddField(
            model_name="principal",
            name="subagent",
            field=models.BooleanField(default=False),
        ),
        migrations.AddConstraint(
            model_name="principal",
            constraint=models.CheckConstraint(
                condition=models.Q(("kind", "agent"), ("subagent", False), _connector="OR"),
                name="subagents_are_agents"),
        ),
        migrations.RunPython(mark_existing_subagents, migrations.RunPython.noop),
    ]
