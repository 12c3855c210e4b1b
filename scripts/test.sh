#!/usr/bin/env bash
# `make test`: unit + integration tests against a real Kafka broker and Redis started here and stopped
# at the end, even when tests fail. Most tests wait on the broker rather than use the CPU, so they run
# in REACH_TEST_WORKERS processes (default 3 on two cores: on the same code, idle, 3 ran the parallel part in
# 15:17 with no rerun, 5 in 16:11 with a rerun and next time failed a test on a Redis timeout, decision 0049;
# pytest-xdist, a test file per process: its module fixtures stay together); the tests marked `serial` (load
# and latency figures) run afterwards, alone.
# Files are handed out in collection order (--no-loadscope-reorder): the integration files, whose tests take
# seconds to a minute each, first, and the unit files' many quick tests last, where they even out the
# workers' ends. xdist's default order (most tests first) left the one-test integration files, the longest,
# for the end, where one worker ran them while the others had nothing left.
# A run in which neither part collects a test (pytest exit 5) is a failure.
# Beside the parallel part (decisions 0067, 0072), whose tests mostly wait on the broker: the tests marked `beside`
# (the 3-minute soak, judged for growth; the gateway's API fuzzing, judged for its answers; neither for latency)
# in a pytest process of their own, one after the other, and with
# REACH_TEST_EXTRAS="image chart" (`make ci`) the image (scripts/image-test.sh: built, then router, gateway and echo
# agent from it end a signed request COMPLETED) and the chart (tests/chart/check_chart.py). Their output is in
# .reach/ci/*.log (the tail printed), a failure of any fails the run, and the serial part starts after all ended.
set -uo pipefail
cd "$(dirname "$0")/.."
export REACH_HOME="${REACH_TEST_HOME:-$PWD/.reach/test}"
export REACH_CI=1   # the broker fixture fails instead of skipping when no broker answers
run() {
  # With no arguments the serial part collects only the files that mark a test serial (collecting every test
  # module again would take ~20 s of CPU for nothing); with arguments both parts get them as given.
  local serial_files="" beside_files=""
  if [ $# -eq 0 ]; then
    serial_files="$(grep -rl --include='*.py' 'mark\.serial' tests | sort | tr '\n' ' ')"
    beside_files="$(grep -rl --include='*.py' 'mark\.beside' tests | sort | tr '\n' ' ')"
  fi
  REACH_SERIAL_FILES="$serial_files" REACH_BESIDE_FILES="$beside_files" scripts/with-local.sh bash -c '
    # What a part cost besides its wall time (decision 0072): the CPU of the processes that ended during it (bash
    # counts a child, and all it waited for, when it reaps it; a docker build runs in the daemon, uncounted), that
    # of the broker JVM, and the load average: whether a part waits or computes, and whether more xdist processes
    # would help.
    hz=$(getconf CLK_TCK)
    children_ticks() { awk "{print \$16 + \$17}" /proc/$$/stat; }
    broker_ticks() {
      local pid; pid=$(pgrep -f "kafka.logs.dir=$REACH_HOME/kafka" | head -n 1)
      if [ -n "$pid" ]; then awk "{print \$14 + \$15}" "/proc/$pid/stat" 2>/dev/null || echo 0; else echo 0; fi
    }
    mark() { t0=$SECONDS; c0=$(children_ticks); j0=$(broker_ticks); l0=$(cut -d" " -f1 /proc/loadavg); }
    spent() {
      c1=$(children_ticks)
      local c=$(( (c1 - c0) / hz )) j=$(( ($(broker_ticks) - j0) / hz )) w=$(( SECONDS - t0 ))
      echo "$1: ${w} s wall; CPU ${c} s in the processes that ended meanwhile (its own and the beside jobs), ${j} s" \
        "in the broker JVM; load average $l0 -> $(cut -d" " -f1 /proc/loadavg)" >&2
    }
    extras=()
    for what in beside ${REACH_TEST_EXTRAS:-}; do
      case $what in
        beside) cmd=(.venv/bin/pytest -q -raR -p no:cacheprovider -m beside --durations=5 ${REACH_BESIDE_FILES:-"$@"}) ;;
        image) cmd=(scripts/image-test.sh) ;;
        chart) cmd=(.venv/bin/python tests/chart/check_chart.py) ;;
        *) echo "REACH_TEST_EXTRAS: unknown check $what (image, chart)" >&2; exit 2 ;;
      esac
      mkdir -p .reach/ci
      ( start=$SECONDS; "${cmd[@]}" >".reach/ci/$what.log" 2>&1; rc=$?
        echo "$what: exit $rc in $((SECONDS - start)) s" >>".reach/ci/$what.log"; exit $rc ) &
      extras+=("$what:$!")
    done
    mark
    .venv/bin/pytest -q -raR -n "${REACH_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder \
      -m "not serial and not beside" --durations=25 "$@"
    parallel=$?
    spent "parallel part"
    extra=0
    for job in "${extras[@]}"; do
      wait "${job#*:}"; rc=$?
      echo "--- ${job%%:*} (.reach/ci/${job%%:*}.log)" >&2; tail -n 15 ".reach/ci/${job%%:*}.log" >&2
      [ $rc -ne 0 ] && [ $rc -ne 5 ] && extra=$rc  # 5: pytest collected nothing marked beside
    done
    echo "beside jobs that outlived the parallel part: CPU $(( ($(children_ticks) - c1) / hz )) s more" >&2
    [ -n "$REACH_SERIAL_FILES" ] && set -- $REACH_SERIAL_FILES
    mark
    .venv/bin/pytest -q -raR -m serial --durations=0 "$@"
    serial=$?
    spent "serial part"
    echo "parallel part: exit $parallel; serial part: exit $serial; beside/image/chart: exit $extra" >&2
    [ $parallel -eq 5 ] && [ $serial -eq 5 ] && { echo "pytest collected no tests: failing" >&2; exit 1; }
    for rc in $parallel $serial $extra; do [ $rc -ne 0 ] && [ $rc -ne 5 ] && exit $rc; done
    exit 0
  ' tests "$@"
}
run "$@"
