#!/usr/bin/env bash
# The test command: install what is missing, then lint, type-check and run the test suite
# (real PostgreSQL clusters, ActiveMQ and Spark, started by the fixtures). Slow experiments are
# marked `slow` and left out; run them with `scripts/test.sh -m slow`.
set -euo pipefail
cd "$(dirname "$0")/.."
SMILE_INSTALL_BROWSER=1 bash scripts/install.sh  # chromium renders the dashboard test
export SPARK_LOCAL_IP=127.0.0.1
.venv/bin/ruff check smile tests
.venv/bin/mypy --strict smile
if [ "$#" -eq 0 ]; then set -- -m "not slow"; fi
exec .venv/bin/python -m pytest -q --durations=25 "$@"
