"""A revocation in a process that has not loaded the runtime yet (`manage.py revoke`, a web
process whose first request is the console's Revoke): releasing the resources of the permits
resting on the grant moves them by the resource kinds' tables, which the extensions register
when the runtime loads. Found by the chaos soak: the revocation failed with a KeyError on the
kind, and the grant stayed in force."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.utils import timezone

from dispatch.models import Grant, Permit
from tests.conftest import make_world
from tests.support.processes import ROOT, child_env

pytestmark = pytest.mark.django_db(transaction=True)


#: What a web process does before its first request is a revocation: set Django up and load
#: the URLs (no system checks run under gunicorn), then revoke.
CHILD = """
import sys
import django
django.setup()
import config.urls  # noqa: F401
from django.utils import timezone
from dispatch.models import Grant
from dispatch.services.authority import grant_revoke_tree
grant = Grant.objects.get(id=sys.argv[1])
print("revoked", grant_revoke_tree(grant=grant, actor_name="test", now=timezone.now()).id)
"""


@pytest.mark.parametrize("command", [["manage.py", "revoke"], ["-c", CHILD]],
                         ids=["manage.py", "web-process"])
def test_a_revocation_in_a_fresh_process_releases_the_permits_resting_on_the_grant(
        command: list[str]) -> None:
    world = make_world(timezone.now())
    _, permit = world.approved_email()
    done = subprocess.run([sys.executable, *command, permit.grant_id], cwd=ROOT,
                          env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"revoked {permit.grant_id}"
    assert Grant.objects.get(id=permit.grant_id).revoked_at is not None
    assert Permit.objects.get(id=permit.id).state == "revoked"
