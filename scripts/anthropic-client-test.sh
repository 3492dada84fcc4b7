#!/usr/bin/env bash
# The official anthropic Python client (pinned) against `glint serve`'s /v1/messages on the tiny
# fixture model (scripts/client-test.sh does the venv, the server and its shutdown; the checks
# are in scripts/anthropic_client_test.py).
exec bash "$(dirname "$0")/client-test.sh" anthropic 0.69.0 scripts/anthropic_client_test.py
