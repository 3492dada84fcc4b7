#!/usr/bin/env bash
# The official openai Python client (pinned) against `glint serve` on the tiny fixture model
# (scripts/client-test.sh does the venv, the server and its shutdown; the checks are in
# scripts/openai_client_test.py).
exec bash "$(dirname "$0")/client-test.sh" openai 1.109.1 scripts/openai_client_test.py /v1
