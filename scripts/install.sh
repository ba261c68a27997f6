#!/usr/bin/env bash
# Install whatever SMILE needs and is missing; fast and silent when everything is there.
#   Debian packages: postgresql-15, openjdk-17-jre-headless, activemq, libpostgresql-jdbc-java
#   (and, with SMILE_INSTALL_BROWSER=1 or for the tests, chromium);
#   the virtual environment .venv/ with the package (editable) and its dev tools.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(postgresql-15 openjdk-17-jre-headless activemq libpostgresql-jdbc-java)
if [ "${SMILE_INSTALL_BROWSER:-0}" = 1 ]; then packages+=(chromium); fi
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then packages+=(python3-venv); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  $sudo apt-get update -qq
  # the activemq package would start a system broker of its own; we run ours, so keep it off
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.smile-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || ! .venv/bin/python -c 'import smile' 2>/dev/null; then
  echo "installing the smile package and its dependencies into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 | grep -v WARNING || true
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]' 2>&1 | grep -vE "WARNING|BuildBackendWarning|^\s" || true
  .venv/bin/python -c 'import smile, psycopg, psycopg2, pyspark, stomp, pglast, fastapi' 
  echo "$want" > "$stamp"
fi
