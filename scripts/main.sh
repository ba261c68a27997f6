#!/usr/bin/env bash
# The main job: install what is missing, start everything (`smile up`: the local cloud, a
# capturer and an agent per machine, the executor, the auditor and the REST API), load the
# dataset through Spark, publish the nine relations and submit Table 1's 25 sharings over REST
# (`smile demo`, with live traffic started first so that admission sees the rates), and keep the
# traffic going while the dashboard shows staleness against the SLAs.
# `SMILE_TWEETS`, `SMILE_MACHINES_N`, `SMILE_RATE` and `SMILE_DURATION` change the sizes.
# Stop everything with `.venv/bin/smile down`. A second run starts over: it purges the demo cloud
# of the previous one (its data, sharings and logs under SMILE_STATE_DIR, /var/tmp/smile).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
export SPARK_LOCAL_IP=127.0.0.1
smile=.venv/bin/smile
$smile down --purge >/dev/null 2>&1 || true
$smile up --machines "${SMILE_MACHINES_N:-3}"
$smile data load --tweets "${SMILE_TWEETS:-100000}" --replace
# traffic first, so admission sees the rates the sharings will live with; then Table 1
$smile demo --rate "${SMILE_RATE:-100}" --duration "${SMILE_DURATION:-300}"
echo
echo "Everything keeps running: the dashboard is at http://127.0.0.1:${SMILE_API_PORT:-8000}/dashboard;"
echo "'$smile down' stops it all."
