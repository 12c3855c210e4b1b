#!/usr/bin/env bash
# `make test`: unit + integration tests against a real Kafka broker and Redis started here and stopped
# at the end, even when tests fail. pytest's "no tests collected" (exit 5) is a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
export REACH_HOME="${REACH_TEST_HOME:-$PWD/.reach/test}"
export REACH_CI=1   # the broker fixture fails instead of skipping when no broker answers
scripts/with-local.sh .venv/bin/pytest -q -ra --durations=25 "$@"
rc=$?
[ $rc -eq 5 ] && { echo "pytest collected no tests: failing" >&2; exit 1; }
exit $rc
