#!/usr/bin/env bash
# Fuzz the REST API with Schemathesis against its own /openapi.json, every route, with an
# admin's token, on a throw-away SMILE of its own (it publishes, creates consumers and withdraws
# at random: never point it at a cloud you care about). No response may be a 5xx and the server
# must be alive at the end. FUZZ_EXAMPLES sets the examples per route (default 100); the
# requests, statuses and Schemathesis' log end up in artifacts/fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
exec bash scripts/test.sh -m slow -s tests/test_fuzz_api.py "$@"
