#!/usr/bin/env bash
# Idempotent machine set-up: Java 17 + Maven check, Kafka jars via Maven, Redis and promtool via apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v java >/dev/null; then
  echo "Java 17 is required for the embedded Kafka broker: apt-get install openjdk-17-jre-headless" >&2
  echo "(or run Kafka with Docker: docker compose -f docker/compose.yaml up -d; export REACH_BOOTSTRAP=127.0.0.1:9092)" >&2
  exit 2
fi
if ! command -v mvn >/dev/null; then
  echo "Maven is required to fetch the Kafka jars: apt-get install maven (or use docker/, see above)" >&2
  exit 2
fi
if ! command -v redis-server >/dev/null; then
  echo "installing redis-server with apt-get ..." >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
fi
if ! command -v promtool >/dev/null; then
  echo "installing promtool (Debian's prometheus package) with apt-get, for the alert rules' tests ..." >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
.venv/bin/python -c "from reach.tooling.local.infra import ensure_jars; print('kafka jars:', ensure_jars())" >&2
