#!/usr/bin/env bash
# Install everything into .venv and run the whole suite: ruff, mypy (strict, with the Django
# and DRF plugins, over protocols/ dispatch/ console/ demo/ config/ and the Python client in
# clients/python), the import contracts, every test on SQLite (with the client's own tests), and
# the database tests again on PostgreSQL. Arguments go to every pytest run.
# With CI=true, PostgreSQL and Redis are required: a missing server fails the run.
#
# The pytest passes run at the same time, as four processes: each store's tests in two shares
# of their modules (TEST_SHARD=K/N, balanced by weight in tests/conftest.py). Most of a test's
# time in lane 2 is spent waiting on fsync, subprocesses and sockets (about half a core each),
# so four passes keep two cores busy where two left them half idle. Nothing is shared between
# them: each has its own var folder (SQLite test database, filesystem broker, destinations),
# its own Redis databases (Celery broker of the worker tests, the login-throttle cache, the
# benchmarks), its own screenshots folder per store; the PostgreSQL test database is named
# after the pass's process, and every port is drawn free. Each pass writes its output to
# artifacts/test-logs/<pass>.log (sqlite-1, sqlite-2, postgres-1, postgres-2); all are printed
# at the end and the run fails if any pass fails (a share left with no test of those the arguments
# name is not a failure). mypy and the import contracts run beside them (artifacts/test-logs/static.log). TEST_SEQUENTIAL=1 runs one pass per store,
# unsharded, one after the other in the foreground instead (for --pdb, -x, or to compare
# timings).
#
# Environment: TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/console),
# TEST_REDIS_SERVER (default redis://127.0.0.1:6379; the SQLite passes use databases 15 and 14,
# 5 and 4, the PostgreSQL passes 13 and 12, 3 and 2, the fast lane 11), TEST_SEQUENTIAL=1, and
# for development only SKIP_SETUP=1: use .venv as it is, without scripts/setup.sh (e.g. from a
# git worktree whose .venv is another checkout's).
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
# mypy and the import contracts: first when the passes run one after the other; beside the
# four passes otherwise (a minute of CPU while they mostly wait), printed before their logs.
static_checks() {
  echo "== mypy (strict with the Django/DRF plugins: protocols dispatch console demo config clients)"
  .venv/bin/mypy
  echo "== import contracts (protocols/ is pure)"
  .venv/bin/lint-imports
}

# Each pass in its own environment. The benchmark smoke test makes its own SQLite and
# PostgreSQL databases whatever DATABASE_URL says, and the run script's test runs
# scripts/run.sh on its own SQLite, so each runs once, in the SQLite pass.
# sqlite_pass / postgres_pass SHARD REDIS_DB BENCH_REDIS_DB [pytest arguments]: SHARD is K/N
# (tests/conftest.py keeps the K-th of N shares of the modules) or empty for all of them.
sqlite_pass() {
  local shard=$1 redis=$2 bench=$3 name=sqlite${1:+-${1%%/*}}
  shift 3
  env -u DATABASE_URL TEST_LANE_CHECK=1 TEST_SHARD="$shard" APP_VAR_DIR="$VAR_ROOT/test-$name" \
    TEST_REDIS_URL="$REDIS_SERVER/$redis" BENCH_REDIS_URL="$REDIS_SERVER/$bench" \
    TEST_SCREENSHOTS_DIR="$ROOT/artifacts/screenshots" \
    $PY -m pytest --durations=25 "$@"
}
# The client's tests (clients/python/tests) never touch the database: `-o testpaths=tests`
# leaves them out, as --ignore cannot (it does not apply to a testpaths folder itself).
postgres_pass() {
  local shard=$1 redis=$2 bench=$3 name=postgres${1:+-${1%%/*}}
  shift 3
  env -u UPDATE_SCREENSHOTS DATABASE_URL="$PG_URL" TEST_SHARD="$shard" \
    APP_VAR_DIR="$VAR_ROOT/test-$name" \
    TEST_REDIS_URL="$REDIS_SERVER/$redis" BENCH_REDIS_URL="$REDIS_SERVER/$bench" \
    TEST_SCREENSHOTS_DIR="$ROOT/artifacts/screenshots/postgres" \
    $PY -m pytest -o testpaths=tests --ignore=tests/unit --ignore=tests/destinations \
    --ignore=tests/bench --ignore=tests/deploy/test_run_script.py --durations=25 "$@"
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
  static_checks
  echo "== pytest on SQLite"
  sqlite_pass "" 15 14 "$@"
  if [ "$postgres" = yes ]; then
    echo "== pytest on PostgreSQL (database tests)"
    postgres_pass "" 13 12 "$@"
  else
    echo "skipped: the PostgreSQL run (no server at $PG_URL)"
  fi
  exit 0
fi

# Four passes at once: each store's tests in two shares (TEST_SHARD, tests/conftest.py). Job
# control gives each its own process group (only while they start), so that an interrupt of
# this script reaches each pytest, which then stops the workers and servers it started. Each
# pass has its own Redis databases (its tests' broker and cache, then the benchmarks').
mkdir -p "$LOGS"
started=$SECONDS
names=(sqlite-1 sqlite-2 postgres-1 postgres-2)
echo "== pytest on SQLite and on PostgreSQL (database tests), each in two shares, all at once"
echo "   logs: $LOGS/{sqlite-1,sqlite-2,postgres-1,postgres-2}.log (printed when all are done)"
pids=()
stop() {
  for pid in "${pids[@]}"; do kill -INT -- "-$pid" 2>/dev/null || true; done
  wait "${pids[@]}" 2>/dev/null || true
  echo "interrupted: every pass stopped; their logs are in $LOGS" >&2
  exit 130
}
trap stop INT TERM
set -m
static_checks >"$LOGS/static.log" 2>&1 &
static_pid=$!
pids+=("$static_pid")
sqlite_pass 1/2 15 14 "$@" >"$LOGS/sqlite-1.log" 2>&1 &
pids+=("$!")
sqlite_pass 2/2 5 4 "$@" >"$LOGS/sqlite-2.log" 2>&1 &
pids+=("$!")
postgres_pass 1/2 13 12 "$@" >"$LOGS/postgres-1.log" 2>&1 &
pids+=("$!")
postgres_pass 2/2 3 2 "$@" >"$LOGS/postgres-2.log" 2>&1 &
pids+=("$!")
set +m

progress() {  # the last "[ NN%]" pytest printed to the log, if any
  grep -o '\[ *[0-9]*%\]' "$1" 2>/dev/null | tail -n 1 | tr -d ' []' || true
}
running() {
  local pid
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && return 0; done
  return 1
}
while running; do
  for _ in $(seq 60); do
    running || break
    sleep 1
  done
  if running; then
    line="   $(( (SECONDS - started) / 60 )) min:"
    for name in "${names[@]}"; do line+=" $name $(progress "$LOGS/$name.log")"; done
    echo "$line"
  fi
done
static_status=0
wait "$static_pid" || static_status=$?
statuses=()
for pid in "${pids[@]:1}"; do
  status=0
  wait "$pid" || status=$?
  statuses+=("$status")
done
trap - INT TERM

cat "$LOGS/static.log"
failed=0
summary=""
if [ "$static_status" != 0 ]; then
  summary+=" mypy or import contracts FAILED;"
  failed=1
fi
for i in "${!names[@]}"; do
  echo "== pytest, ${names[$i]} ($LOGS/${names[$i]}.log)"
  cat "$LOGS/${names[$i]}.log"
  if [ "${statuses[$i]}" = 0 ]; then
    summary+=" ${names[$i]} passed;"
  elif [ "${statuses[$i]}" = 5 ]; then  # pytest's "no tests": the arguments named too few
    summary+=" ${names[$i]} had no test of those asked for;"
  else
    summary+=" ${names[$i]} FAILED (pytest exit ${statuses[$i]});"
    failed=1
  fi
done
echo "==$summary all in $(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s"
[ "$failed" = 0 ]
