#!/usr/bin/env bash
# Run a command against the embedded broker + Redis (or REACH_BOOTSTRAP); stop what this script started.
set -uo pipefail
cd "$(dirname "$0")/.."
started=""
if [ -z "${REACH_BOOTSTRAP:-}" ]; then
  if ! .venv/bin/reach local status >/dev/null 2>&1; then
    exports=$(.venv/bin/reach local up) || exit 4
    started=1
  else
    exports=$(.venv/bin/reach local status 2>/dev/null)
  fi
  eval "$exports"
fi
cleanup() { [ -n "$started" ] && .venv/bin/reach local down; }
trap cleanup EXIT INT TERM
"$@"
