#!/usr/bin/env bash
# `make bench`: installs the load generator (Debian's wrk) and matplotlib if missing, then runs
# every scenario side by side (bench/bench.py). Takes about 2-3 minutes.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if ! command -v wrk >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq wrk
  else
    echo "wrk is missing: sudo apt-get install wrk"; exit 1
  fi
fi
py="$root/.tools/venv/bin/python"
"$py" -c 'import matplotlib' 2>/dev/null || "$root/.tools/venv/bin/pip" install --quiet --disable-pip-version-check matplotlib
if [ "${1:-}" = "--soak" ]; then
  exec "$py" "$root/bench/soak.py"
fi
exec "$py" "$root/bench/bench.py" "$@"
