#!/usr/bin/env bash
# Install everything into .venv and run the whole suite: ruff, mypy (strict, with the Django
# and DRF plugins, over protocols/ dispatch/ console/ demo/ config/ and the Python client in
# clients/python), the import contracts, every test on SQLite (with the client's own tests), and
# the database tests again on PostgreSQL. Arguments go to both pytest runs.
# With CI=true, PostgreSQL and Redis are required: a missing server fails the run.
#
# The two pytest passes run at the same time, as two processes (most of a test's time is spent
# waiting on fsync, subprocesses and sockets, so two passes on two cores take little longer than
# one). Nothing is shared between them: each has its own var folder (SQLite test database,
# filesystem broker, destinations), its own Redis databases (Celery broker of the worker tests,
# the login-throttle cache, the benchmarks), its own screenshots folder; the PostgreSQL test
# database is named after the pass's process, and every port is one the OS gave. Each pass
# writes its output to artifacts/test-logs/<pass>.log; both logs are printed at the end and the
# run fails if either pass fails. TEST_SEQUENTIAL=1 runs them one after the other in the
# foreground instead (for --pdb, -x, or to compare timings).
#
# Environment: TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/console),
# TEST_REDIS_SERVER (default redis://127.0.0.1:6379; the SQLite pass uses databases 15 and 14,
# the PostgreSQL pass 13 and 12), TEST_SEQUENTIAL=1, and for development only SKIP_SETUP=1:
# use .venv as it is, without scripts/setup.sh (e.g. from a git worktree whose .venv is another
# checkout's).
#
# `bash scripts/test.sh --fast [pytest arguments]` is the fast lane, for every change: ruff, then
# the tests that stay in their process on SQLite (not those marked `lane2`, tests/conftest.py:
# no spawned process, no browser, no PostgreSQL), with the slowest printed. CI runs everything.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
if [ "${SKIP_SETUP:-}" != "1" ]; then
  bash scripts/setup.sh
fi
export PYTHONPATH=.
export DJANGO_SETTINGS_MODULE=config.test_settings
PY=.venv/bin/python
if [ "${1:-}" = "--fast" ]; then
  shift
  echo "== ruff"
  .venv/bin/ruff check .
  echo "== the fast lane: pytest on SQLite, in process (-m 'not lane2')"
  exec env -u DATABASE_URL TEST_LANE=1 APP_VAR_DIR="${APP_VAR_DIR:-$ROOT/var}/test-fast" \
    TEST_REDIS_URL="${TEST_REDIS_SERVER:-redis://127.0.0.1:6379}/11" \
    $PY -m pytest tests clients/python/tests -m "not lane2" --durations=15 "$@"
fi
PG_URL="${TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/console}"
REDIS_SERVER="${TEST_REDIS_SERVER:-redis://127.0.0.1:6379}"
REDIS_SERVER="${REDIS_SERVER%/}"
VAR_ROOT="${APP_VAR_DIR:-$ROOT/var}"
LOGS="$ROOT/artifacts/test-logs"

echo "== ruff"
.venv/bin/ruff check .
echo "== mypy (strict with the Django/DRF plugins: protocols dispatch console demo config clients)"
.venv/bin/mypy
echo "== import contracts (protocols/ is pure)"
.venv/bin/lint-imports

# Each pass in its own environment. The benchmark smoke test makes its own SQLite and
# PostgreSQL databases whatever DATABASE_URL says, and the run script's test runs
# scripts/run.sh on its own SQLite, so each runs once, in the SQLite pass.
sqlite_pass() {
  env -u DATABASE_URL TEST_LANE_CHECK=1 APP_VAR_DIR="$VAR_ROOT/test-sqlite" \
    TEST_REDIS_URL="$REDIS_SERVER/15" BENCH_REDIS_URL="$REDIS_SERVER/14" \
    TEST_SCREENSHOTS_DIR="$ROOT/artifacts/screenshots" \
    $PY -m pytest --durations=25 "$@"
}
postgres_pass() {
  env -u UPDATE_SCREENSHOTS DATABASE_URL="$PG_URL" APP_VAR_DIR="$VAR_ROOT/test-postgres" \
    TEST_REDIS_URL="$REDIS_SERVER/13" BENCH_REDIS_URL="$REDIS_SERVER/12" \
    TEST_SCREENSHOTS_DIR="$ROOT/artifacts/screenshots/postgres" \
    $PY -m pytest --ignore=tests/unit --ignore=tests/destinations --ignore=tests/bench \
    --ignore=tests/deploy/test_run_script.py --ignore=clients/python/tests --durations=25 "$@"
}

if $PY - "$PG_URL" <<'PYEOF'
import sys, psycopg
try:
    psycopg.connect(sys.argv[1].replace("/console", "/postgres"), connect_timeout=3).close()
except Exception as exc:
    print(f"PostgreSQL not reachable at {sys.argv[1]}: {exc}")
    sys.exit(1)
PYEOF
then
  postgres=yes
elif [ "${CI:-}" = "true" ]; then
  echo "CI=true: the PostgreSQL tests are required and PostgreSQL is down" >&2
  exit 1
else
  postgres=no
fi

if [ "$postgres" = no ] || [ "${TEST_SEQUENTIAL:-}" = "1" ]; then
  echo "== pytest on SQLite"
  sqlite_pass "$@"
  if [ "$postgres" = yes ]; then
    echo "== pytest on PostgreSQL (database tests)"
    postgres_pass "$@"
  else
    echo "skipped: the PostgreSQL run (no server at $PG_URL)"
  fi
  exit 0
fi

# Both passes at once. Job control gives each its own process group (only while they start),
# so that an interrupt of this script reaches each pytest, which then stops the workers and
# servers it started.
mkdir -p "$LOGS"
started=$SECONDS
echo "== pytest on SQLite and on PostgreSQL (database tests), at the same time"
echo "   logs: $LOGS/sqlite.log, $LOGS/postgres.log (printed when both are done)"
pids=()
stop() {
  for pid in "${pids[@]}"; do kill -INT -- "-$pid" 2>/dev/null || true; done
  wait "${pids[@]}" 2>/dev/null || true
  echo "interrupted: both passes stopped; their logs are in $LOGS" >&2
  exit 130
}
trap stop INT TERM
set -m
sqlite_pass "$@" >"$LOGS/sqlite.log" 2>&1 &
sqlite_pid=$!
pids+=("$sqlite_pid")
postgres_pass "$@" >"$LOGS/postgres.log" 2>&1 &
postgres_pid=$!
pids+=("$postgres_pid")
set +m

progress() {  # the last "[ NN%]" pytest printed to the log, if any
  grep -o '\[ *[0-9]*%\]' "$1" 2>/dev/null | tail -n 1 | tr -d ' []' || true
}
running() { kill -0 "$1" 2>/dev/null; }
while running "$sqlite_pid" || running "$postgres_pid"; do
  for _ in $(seq 60); do
    { running "$sqlite_pid" || running "$postgres_pid"; } || break
    sleep 1
  done
  if running "$sqlite_pid" || running "$postgres_pid"; then
    echo "   $(( (SECONDS - started) / 60 )) min: SQLite $(progress "$LOGS/sqlite.log")," \
      "PostgreSQL $(progress "$LOGS/postgres.log")"
  fi
done
sqlite_status=0
wait "$sqlite_pid" || sqlite_status=$?
postgres_status=0
wait "$postgres_pid" || postgres_status=$?
trap - INT TERM

echo "== pytest on SQLite ($LOGS/sqlite.log)"
cat "$LOGS/sqlite.log"
echo "== pytest on PostgreSQL, database tests ($LOGS/postgres.log)"
cat "$LOGS/postgres.log"
outcome() { if [ "$1" = 0 ]; then echo passed; else echo "FAILED (pytest exit $1)"; fi; }
echo "== SQLite pass: $(outcome "$sqlite_status"); PostgreSQL pass: $(outcome "$postgres_status");" \
  "both in $(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s"
[ "$sqlite_status" = 0 ] && [ "$postgres_status" = 0 ]
