#!/usr/bin/env bash
# The official anthropic Python client (pinned) against `glint serve`'s /v1/messages on the tiny
# fixture model. Installs the client into a virtual environment (default target/anthropic-venv),
# builds glint unless GLINT_BIN names a binary, starts the server on a free loopback port, runs
# scripts/anthropic_client_test.py and stops the server.
set -euo pipefail
cd "$(dirname "$0")/.."
ANTHROPIC_VERSION=0.69.0
VENV=${VENV:-target/anthropic-venv}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import anthropic, sys; sys.exit(anthropic.__version__ != '$ANTHROPIC_VERSION')" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "anthropic==$ANTHROPIC_VERSION"
fi
if [ -z "${GLINT_BIN:-}" ]; then
  cargo build --release -q -p glint-cli
  GLINT_BIN=target/release/glint
fi
LOG=$(mktemp)
KEY=test-key-$$
"$GLINT_BIN" serve -m fixtures/glm5/glm5-tiny-f32.gguf --host 127.0.0.1 --port 0 --api-key "$KEY" 2>"$LOG" &
PID=$!
trap 'kill -TERM $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -f "$LOG"' EXIT
ADDR=
for _ in $(seq 1 100); do
  ADDR=$(sed -n 's|^glint serve: http://\([^ ]*\).*|\1|p' "$LOG" | head -1)
  [ -n "$ADDR" ] && break
  kill -0 $PID 2>/dev/null || { cat "$LOG"; exit 1; }
  sleep 0.1
done
[ -n "$ADDR" ] || { echo "glint serve did not start"; cat "$LOG"; exit 1; }
"$VENV/bin/python" scripts/anthropic_client_test.py "http://$ADDR" "$KEY"
