#!/usr/bin/env bash
# Install everything into .venv and run the whole suite: ruff, mypy (strict, with the Django
# and DRF plugins, over protocols/ dispatch/ console/ demo/ config/ and the Python client in
# clients/python), the import contracts, every test on SQLite (with the client's own tests), then
# the database tests again on PostgreSQL.
# With CI=true, PostgreSQL and Redis are required: a missing server fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYTHONPATH=.
export DJANGO_SETTINGS_MODULE=config.test_settings
PY=.venv/bin/python
PG_URL="${TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/console}"

echo "== ruff"
.venv/bin/ruff check .
echo "== mypy (strict with the Django/DRF plugins: protocols dispatch console demo config clients)"
.venv/bin/mypy
echo "== import contracts (protocols/ is pure)"
.venv/bin/lint-imports

echo "== pytest on SQLite"
unset DATABASE_URL
$PY -m pytest "$@"

echo "== pytest on PostgreSQL (database tests)"
if $PY - "$PG_URL" <<'PYEOF'
import sys, psycopg
try:
    psycopg.connect(sys.argv[1].replace("/console", "/postgres"), connect_timeout=3).close()
except Exception as exc:
    print(f"PostgreSQL not reachable at {sys.argv[1]}: {exc}")
    sys.exit(1)
PYEOF
then
  DATABASE_URL="$PG_URL" $PY -m pytest --ignore=tests/unit --ignore=tests/destinations \
    --ignore=clients/python/tests "$@"
elif [ "${CI:-}" = "true" ]; then
  echo "CI=true: the PostgreSQL tests are required and PostgreSQL is down" >&2
  exit 1
else
  echo "skipped: the PostgreSQL run (no server at $PG_URL)"
fi
