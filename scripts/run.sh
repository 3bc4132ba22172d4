#!/usr/bin/env bash
# Install everything into .venv and start the console on the embedded default: SQLite, a
# filesystem broker beside it, a Celery worker and beat, the demo destinations, the MCP gateway
# over streamable HTTP (docs/mcp.md), demo data. PORT (8000) and MCP_PORT (8001) move them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export DJANGO_DEBUG="${DJANGO_DEBUG:-1}"
PORT="${PORT:-8000}"
MCP_PORT="${MCP_PORT:-8001}"
# The console's address in the approval_url an MCP answer gives.
export CONSOLE_BASE_URL="${CONSOLE_BASE_URL:-http://127.0.0.1:${PORT}}"
PY=.venv/bin/python
mkdir -p var/log
$PY manage.py migrate --noinput >/dev/null
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM
$PY manage.py run_destinations >var/log/destinations.log 2>&1 & pids+=($!)
.venv/bin/celery -A config worker --loglevel=INFO --concurrency=2 >var/log/worker.log 2>&1 & pids+=($!)
.venv/bin/celery -A config beat --loglevel=INFO --schedule=var/celerybeat-schedule >var/log/beat.log 2>&1 & pids+=($!)
$PY manage.py mcp_serve --http --host 127.0.0.1 --port "$MCP_PORT" >var/log/mcp.log 2>&1 & pids+=($!)
echo "----------------------------------------------------------------"
seeded=$($PY manage.py seed_demo --url "http://127.0.0.1:${PORT}/console/")
echo "$seeded"
token=$(sed -n "s/^Agent '[^']*' bearer token: //p" <<<"$seeded")
mcp_url="http://127.0.0.1:${MCP_PORT}/mcp/"
echo
echo "MCP gateway (streamable HTTP, docs/mcp.md): $mcp_url"
echo "Paste into an MCP client's configuration to act as the demo agent:"
echo "  {\"mcpServers\": {\"exact-action-console\": {\"type\": \"http\", \"url\": \"$mcp_url\","
echo "   \"headers\": {\"Authorization\": \"Bearer $token\"}}}}"
echo "Or over stdio, started by the client itself:"
echo "  DJANGO_DEBUG=1 CONSOLE_BASE_URL=$CONSOLE_BASE_URL $PWD/.venv/bin/python $PWD/manage.py mcp_serve --token $token"
echo
$PY manage.py run_agent demo/agent_script.json --poll 2 >var/log/agent.log 2>&1 & pids+=($!)
$PY demo/research_example.py --poll 2 >var/log/research.log 2>&1 & pids+=($!)
echo "A scripted agent (demo/agent_script.json) is proposing actions; approve them in the queue."
echo "A research agent (demo/research_example.py) fetches sources, has its report attested and"
echo "proposes it for publication; its log is var/log/research.log."
echo "Logs: var/log/ (destinations, worker, beat, mcp, agent, research). Ctrl-C stops everything."
echo "----------------------------------------------------------------"
$PY manage.py runserver "127.0.0.1:${PORT}" --noreload
