#!/usr/bin/env bash
# The main job: install what is missing, start the local cloud, load a small dataset through
# Spark, and drive live traffic into it. `SMILE_TWEETS`, `SMILE_MACHINES_N`, `SMILE_RATE` and
# `SMILE_DURATION` change the sizes. Stop everything with `.venv/bin/smile cloud down`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
smile=.venv/bin/smile
$smile cloud up --machines "${SMILE_MACHINES_N:-3}"
$smile data load --tweets "${SMILE_TWEETS:-100000}" --replace
$smile workload run --rate "${SMILE_RATE:-500}" --duration "${SMILE_DURATION:-20}"
echo
echo "The local cloud keeps running: '$smile cloud status' shows it, '$smile cloud down' stops it."
