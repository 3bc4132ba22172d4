"""The restore drill (scripts/restore_drill.sh, docs/deployment.md#restore-drill) on the real
PostgreSQL: the demo's data, pg_dump, pg_restore into a new database, and the audit verifying
there; and the same drill failing when the restored audit was changed on the way."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.lane2]

DRILL = Path(ROOT) / "scripts" / "restore_drill.sh"


def server_url() -> str:
    """The PostgreSQL server of the run's DATABASE_URL, without its database."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        pytest.skip("the drill restores a PostgreSQL dump: run with DATABASE_URL on PostgreSQL")
    return re.sub(r"/[^/]*$", "", url)


def drill(tmp_path: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path, "LANG": "C.UTF-8", "HOME": str(tmp_path), "TMPDIR": str(tmp_path),
           "PYTHON": sys.executable}
    return subprocess.run(["bash", str(DRILL), server_url()], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def test_the_drill_restores_a_dump_whose_audit_verifies(tmp_path: Path) -> None:
    done = drill(tmp_path, os.environ["PATH"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"restore drill passed in \d+ s", done.stdout), done.stdout
    # Verified before the dump and after the restore, on the demo's sealed audit.
    assert done.stdout.count("audit chain verifies") == 2, done.stdout
    restored = re.search(r"restored: (\d+) audit events \((\d+) sealed\), (\d+) operations",
                         done.stdout)
    assert restored, done.stdout
    events, sealed, operations = map(int, restored.groups())
    assert events > 0 and sealed == events and operations > 0, done.stdout
    # Nothing left behind: both databases dropped, the work folder removed.
    listed = subprocess.run(["psql", "-X", "-tAc", "SELECT datname FROM pg_database",
                             f"{server_url()}/postgres"], capture_output=True, text=True,
                            check=True, timeout=60).stdout
    named = re.search(r"\((drill_\w+)_source\)", done.stdout)
    assert named, done.stdout
    assert named.group(1) not in listed, listed
    assert not list(tmp_path.glob("restore-drill.*"))


def test_the_drill_fails_when_the_restored_audit_was_changed(tmp_path: Path) -> None:
    """pg_restore, then one audit event changed behind the application's back: the drill's
    audit_verify names it and the drill fails."""
    real = shutil.which("pg_restore")
    assert real
    tools = tmp_path / "bin"
    tools.mkdir()
    wrapper = tools / "pg_restore"
    wrapper.write_text(f"""#!/bin/sh
{real} "$@" || exit $?
for arg in "$@"; do case $arg in --dbname=*) db=${{arg#--dbname=}};; esac; done
psql -X -q "$db" -c "UPDATE dispatch_auditevent SET actor = 'mallory'
  WHERE id = (SELECT min(id) FROM dispatch_auditevent)"
""")
    wrapper.chmod(0o755)
    done = drill(tmp_path, f"{tools}:{os.environ['PATH']}")
    assert done.returncode != 0, done.stdout
    assert "restore drill FAILED: audit_verify after the restore" in done.stderr, done.stderr
    assert "changed" in done.stderr, done.stderr
    assert "restore drill passed" not in done.stdout
