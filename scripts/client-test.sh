#!/usr/bin/env bash
# An official Python client (pinned) against `glint serve` on the tiny fixture model: installs
# PACKAGE==VERSION into a virtual environment (default target/PACKAGE-venv), builds glint unless
# GLINT_BIN names a binary, starts the server on a free loopback port with an API key, runs
# TEST_SCRIPT with the server's base URL (plus PATH) and the key, and stops the server.
# GLINT_SERVE_ARGS adds arguments to `glint serve` (e.g. `--device cuda`); on a machine with no
# network, pip's own PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR install the pin from downloaded wheels.
#
#   scripts/client-test.sh PACKAGE VERSION TEST_SCRIPT [PATH]
# (scripts/openai-client-test.sh and scripts/anthropic-client-test.sh name the pins.)
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGE=$1 VERSION=$2 TEST=$3 URL_PATH=${4:-}
VENV=${VENV:-target/$PACKAGE-venv}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import $PACKAGE, sys; sys.exit($PACKAGE.__version__ != '$VERSION')" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "$PACKAGE==$VERSION"
fi
if [ -z "${GLINT_BIN:-}" ]; then
  cargo build --release -q -p glint-cli
  GLINT_BIN=target/release/glint
fi
LOG=$(mktemp)
KEY=test-key-$$
# shellcheck disable=SC2086 # GLINT_SERVE_ARGS is a list of words
"$GLINT_BIN" serve -m fixtures/glm5/glm5-tiny-f32.gguf --host 127.0.0.1 --port 0 --api-key "$KEY" ${GLINT_SERVE_ARGS:-} 2>"$LOG" &
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
"$VENV/bin/python" "$TEST" "http://$ADDR$URL_PATH" "$KEY"
