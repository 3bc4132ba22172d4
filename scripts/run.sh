#!/usr/bin/env bash
# Install everything into .venv and start the console on the embedded default: SQLite, a
# filesystem broker beside it, a Celery worker and beat, the demo destinations, the MCP gateway
# over streamable HTTP (docs/mcp.md), demo data. PORT (8000) and MCP_PORT (8001) move them;
# APP_VAR_DIR (var/) holds the database, the broker, the logs and the demo agent's token.
#
# Run it again and it carries on: the demo data is made once, the demo agent keeps its token
# (APP_VAR_DIR/demo/agent-token) and the scripted agents resume their executions.
# Ctrl-C or a plain `kill` (SIGTERM) of this script stops every process it started, theirs
# too: each runs in a process group of its own, which gets SIGTERM, then SIGKILL after
# STOP_GRACE seconds (8).
set -euo pipefail
set -m  # job control: every background job leads a process group of its own
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export DJANGO_DEBUG="${DJANGO_DEBUG:-1}"
# The demo is an extension, off unless asked for: this script runs it.
export DISPATCH_EXTENSIONS="${DISPATCH_EXTENSIONS-demo.extension}"
PORT="${PORT:-8000}"
MCP_PORT="${MCP_PORT:-8001}"
STOP_GRACE="${STOP_GRACE:-8}"
export APP_VAR_DIR="${APP_VAR_DIR:-$PWD/var}"
LOGS="$APP_VAR_DIR/log"
# The console's address as people reach it: every approval link handed to an agent.
export CONSOLE_PUBLIC_URL="${CONSOLE_PUBLIC_URL:-${CONSOLE_BASE_URL:-http://127.0.0.1:${PORT}}}"
# The demo's HTTP action (docs/actions.md): a helpdesk ticket sent to the destinations' helpdesk
# on the bank's port, a loopback host allowed for it.
export ACTIONS_DIR="${ACTIONS_DIR-demo/actions}"
export ACTIONS_ALLOWED_HOSTS="${ACTIONS_ALLOWED_HOSTS-127.0.0.1}"
# The demo's four eyes: a transfer of 10,000.00 or more needs two operators (olive and otto).
export APPROVAL_RULES="${APPROVAL_RULES:-$(cat demo/approval_rules.json)}"
PY=.venv/bin/python
mkdir -p "$LOGS"

groups=()
# Start "$@" in the background, in a process group of its own, logging to LOGS/NAME.log.
start() {
  local name=$1
  shift
  "$@" </dev/null >"$LOGS/$name.log" 2>&1 &
  groups+=("$!")
}
alive() {
  local group
  for group in "${groups[@]}"; do
    kill -0 -- "-$group" 2>/dev/null && return 0
  done
  return 1
}
stop() {
  trap - EXIT INT TERM
  ((${#groups[@]})) || return 0
  echo "Stopping..." >&2
  exec 2>/dev/null  # not the job notices of each stopped group
  # The leaders first (a Celery worker stops its pool itself), then what is left of each group.
  kill -TERM -- "${groups[@]}" 2>/dev/null || true
  # A deadline in seconds, not a count of naps: on a loaded machine each nap takes longer.
  local deadline=$((SECONDS + STOP_GRACE))
  while alive && ((SECONDS < deadline)); do
    sleep 0.2
  done
  for group in "${groups[@]}"; do kill -KILL -- "-$group" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop EXIT
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM

$PY manage.py migrate --noinput >/dev/null
# A message file the filesystem broker left empty (its writer stopped between creating and
# writing it) holds no task, and would stop the worker that reads it: drop it.
find "$APP_VAR_DIR/broker" -name '*.msg' -size 0 -delete 2>/dev/null || true
start destinations $PY manage.py run_destinations
start worker .venv/bin/celery -A config worker --loglevel=INFO --concurrency=2
start beat .venv/bin/celery -A config beat --loglevel=INFO \
  --schedule="$APP_VAR_DIR/celerybeat-schedule"
start mcp $PY manage.py mcp_serve --http --host 127.0.0.1 --port "$MCP_PORT"
# The seed dispatches one email to the SMTP sink (the unknown outcome): the sink must listen.
for _ in $(seq 150); do
  grep -q "destinations ready" "$LOGS/destinations.log" && break
  kill -0 "${groups[0]}" 2>/dev/null || { cat "$LOGS/destinations.log" >&2; exit 1; }
  sleep 0.2
done
echo "----------------------------------------------------------------"
seeded=$($PY manage.py seed_demo --agents --url "http://127.0.0.1:${PORT}/console/")
sed '/execution: /d' <<<"$seeded"
token=$(sed -n "s/^Agent '[^']*' bearer token: //p" <<<"$seeded")
support=$(sed -n "s/^Support agent execution: //p" <<<"$seeded")
research=$(sed -n "s/^Research agent execution: //p" <<<"$seeded")
mcp_url="http://127.0.0.1:${MCP_PORT}/mcp/"
echo
echo "MCP gateway (streamable HTTP, docs/mcp.md): $mcp_url"
echo "Paste into an MCP client's configuration to act as the demo agent:"
echo "  {\"mcpServers\": {\"exact-action-console\": {\"type\": \"http\", \"url\": \"$mcp_url\","
echo "   \"headers\": {\"Authorization\": \"Bearer $token\"}}}}"
echo "Or over stdio, started by the client itself:"
echo "  DJANGO_DEBUG=1 DISPATCH_EXTENSIONS=$DISPATCH_EXTENSIONS CONSOLE_PUBLIC_URL=$CONSOLE_PUBLIC_URL $PWD/.venv/bin/python $PWD/manage.py mcp_serve --token $token"
echo
start agent $PY manage.py run_agent demo/agent_script.json --execution "$support" --poll 2
start research $PY demo/research_example.py --execution "$research" --poll 2
echo "A scripted agent (demo/agent_script.json) is proposing actions; approve them in the queue."
echo "A research agent (demo/research_example.py) fetches sources, has its report attested and"
echo "proposes it for publication; its log is $LOGS/research.log."
echo "Waiting too: a large payment, a stale proposal (its draft was edited since) and, for the"
echo "admin, an unknown outcome (Unknown outcomes)."
echo "Logs: $LOGS/ (destinations, worker, beat, mcp, agent, research)."
echo "Ctrl-C (or kill $$) stops everything; run it again to carry on."
echo "----------------------------------------------------------------"
# The web server's requests show here.
$PY manage.py runserver "127.0.0.1:${PORT}" --noreload </dev/null &
server=$!
groups+=("$server")
wait "$server"
