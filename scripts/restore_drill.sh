#!/usr/bin/env bash
# The restore drill (docs/deployment.md#restore-drill), run end to end on a real PostgreSQL:
#
#   1. a fresh database, migrated, holding the demo's data (seed_demo against the demo
#      destinations: tenants, people, agents, proposals, approvals, operations and their audit);
#   2. the audit sealed (signed blocks, and the checkpoint log a worker keeps);
#   3. pg_dump of that database, in the custom format;
#   4. pg_restore into another, new database;
#   5. on the restored database: no migration missing, the same rows in every table, and
#      `manage.py audit_verify --checkpoint` passing against the checkpoint log kept beside the
#      dump, with the same SIGNING_KEYS.
#
# Usage: scripts/restore_drill.sh [SERVER_URL]
#   SERVER_URL: a role that may create databases, without a database name
#   (default: $DRILL_SERVER_URL, else postgres://postgres@127.0.0.1:5432).
#   PYTHON: the interpreter with the project installed (default: .venv/bin/python, else python).
#   KEEP=1 keeps both databases and the work folder (printed) for a look.
# Exits 0 and prints "restore drill passed" when every check holds; non-zero naming the step.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

server=${1:-${DRILL_SERVER_URL:-postgres://postgres@127.0.0.1:5432}}
server=${server%/}
if [[ -z ${PYTHON:-} ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python; fi
fi
stamp="drill_$(date +%s)_$$"
source_db="${stamp}_source"
restored_db="${stamp}_restored"
work=$(mktemp -d "${TMPDIR:-/tmp}/restore-drill.XXXXXX")
destinations_pid=""

step() { printf '== %s\n' "$*"; }
fail() { printf 'restore drill FAILED: %s\n' "$*" >&2; exit 1; }
sql() { psql -X -q -v ON_ERROR_STOP=1 "$server/$1" -tAc "$2"; }

cleanup() {
  if [[ -n $destinations_pid ]] && kill -0 "$destinations_pid" 2>/dev/null; then
    kill -TERM "$destinations_pid" 2>/dev/null || true
    wait "$destinations_pid" 2>/dev/null || true
  fi
  if [[ ${KEEP:-0} == 1 ]]; then
    echo "kept: databases $source_db and $restored_db, folder $work"
    return
  fi
  for db in "$source_db" "$restored_db"; do
    psql -X -q "$server/postgres" -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" \
      >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }

# A production-shaped process: DEBUG off, PostgreSQL, one set of signing keys for every step
# (the keys are part of what a backup must keep: docs/deployment.md#backups).
export PYTHONPATH="$ROOT:$ROOT/clients/python${PYTHONPATH:+:$PYTHONPATH}"
export DJANGO_SETTINGS_MODULE=config.settings DJANGO_DEBUG=0 LOG_LEVEL=WARNING
export DISPATCH_EXTENSIONS=demo.extension
SECRET_KEY=$("$PYTHON" -c 'import secrets; print(secrets.token_urlsafe(50))')
SIGNING_KEYS=$("$PYTHON" -c 'import json; from dispatch.signing import generate_entry; print(json.dumps([generate_entry()]))')
export SECRET_KEY SIGNING_KEYS
export APP_VAR_DIR="$work/var" AUDIT_CHECKPOINT_DIR="$work/checkpoints"
export DESTINATIONS_DIR="$work/destinations"
smtp=$(free_port); web=$(free_port); lookup=$(free_port)
export SMTP_SINK_HOST=127.0.0.1 SMTP_SINK_PORT=$smtp
export SMTP_SINK_LOOKUP_URL="http://127.0.0.1:$lookup" BANK_URL="http://127.0.0.1:$web"
export PUBLISHER_URL="http://127.0.0.1:$web" SOURCES_URL="http://127.0.0.1:$web/sources"
manage() { "$PYTHON" manage.py "$@"; }

started=$SECONDS
step "1. a new database with the demo's data ($source_db)"
sql postgres "CREATE DATABASE \"$source_db\"" >/dev/null
export DATABASE_URL="$server/$source_db"
manage migrate --noinput >/dev/null || fail "migrate"
# Started directly, not through `manage`: `$!` must be the process itself, not a subshell that a
# TERM would end while leaving the destinations running.
"$PYTHON" manage.py run_destinations >"$work/destinations.log" 2>&1 &
destinations_pid=$!
for _ in $(seq 120); do
  grep -q "destinations ready" "$work/destinations.log" && break
  kill -0 "$destinations_pid" 2>/dev/null || fail "the destinations: $(cat "$work/destinations.log")"
  sleep 0.5
done
manage seed_demo --url http://localhost:8000/console/ >"$work/seed.log" 2>&1 \
  || fail "seed_demo: $(tail -20 "$work/seed.log")"
kill -TERM "$destinations_pid"; wait "$destinations_pid" || true; destinations_pid=""

step "2. the audit sealed, its checkpoint log kept"
AUDIT_SEAL_LAG=0 manage audit_seal
cat "$AUDIT_CHECKPOINT_DIR"/*.jsonl >"$work/checkpoints.jsonl" 2>/dev/null \
  || fail "no checkpoint log in $AUDIT_CHECKPOINT_DIR"
manage audit_verify --checkpoint "$work/checkpoints.jsonl" || fail "audit_verify before the dump"

step "3. pg_dump"
pg_dump --format=custom --no-owner --file="$work/console.dump" "$server/$source_db" \
  || fail "pg_dump"
echo "dump: $(du -h "$work/console.dump" | cut -f1)"

step "4. pg_restore into a new database ($restored_db)"
sql postgres "CREATE DATABASE \"$restored_db\"" >/dev/null
pg_restore --no-owner --exit-on-error --dbname="$server/$restored_db" "$work/console.dump" \
  || fail "pg_restore"

step "5. the restored database"
export DATABASE_URL="$server/$restored_db"
manage migrate --check >/dev/null || fail "the restored database lacks a migration"
count_rows="SELECT string_agg(format('%s=%s', t, (xpath('/row/c/text()', query_to_xml(
  format('SELECT count(*) AS c FROM %I', t), false, true, '')))[1]::text), ' ' ORDER BY t)
  FROM (SELECT tablename AS t FROM pg_tables WHERE schemaname = 'public') AS tables"
before=$(sql "$source_db" "$count_rows")
after=$(sql "$restored_db" "$count_rows")
[[ $before == "$after" ]] || fail "row counts differ: $before / $after"
events=$(sql "$restored_db" "SELECT count(*) FROM dispatch_auditevent")
sealed=$(sql "$restored_db" "SELECT count(*) FROM dispatch_auditseal")
operations=$(sql "$restored_db" "SELECT count(*) FROM dispatch_operation")
echo "restored: $events audit events ($sealed sealed), $operations operations, every table's rows equal"
manage audit_verify --checkpoint "$work/checkpoints.jsonl" || fail "audit_verify after the restore"
echo "restore drill passed in $((SECONDS - started)) s"
