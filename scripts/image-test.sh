#!/usr/bin/env bash
# `make image-test`: build the image (scripts/image.sh), then run the router, the gateway and examples/echo_agent
# from it against REACH_BOOTSTRAP / REACH_REDIS_URL, containers on the host's network only, read-only root file
# systems, non-root; a signed POST /v1/envelopes must end COMPLETED. Stops every container it started.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${REACH_BOOTSTRAP:?REACH_BOOTSTRAP is unset (run through scripts/with-local.sh)}"
: "${REACH_REDIS_URL:?REACH_REDIS_URL is unset}"
IMAGE=${IMAGE:-agent-reach:dev}
PY=${PY:-.venv/bin/python}

scripts/image.sh
docker run --rm --network host "$IMAGE" --help >/dev/null
[ "$(docker run --rm --network host --entrypoint id "$IMAGE" -u)" != 0 ] || { echo "image-test: runs as root" >&2; exit 1; }

run_id=$(date +%s)-$$
ns="imgtest-$run_id"
ports=$($PY -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))')
read -r web_port gw_port <<<"$ports"
token=$($PY -c 'import secrets; print(secrets.token_hex(16))')
key=$($PY -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')
common=(--network host --read-only --tmpfs /var/lib/reach:uid=10001,gid=10001 --tmpfs /tmp:uid=10001,gid=10001
        -e REACH_BOOTSTRAP -e REACH_REDIS_URL -e "REACH_NAMESPACE=$ns" -e "REACH_WEB_PORT=$web_port"
        -e REACH_WEB_HOST=127.0.0.1 -e "REACH_WEB_TOKEN=$token" -e "REACH_GATEWAY_SECRETS_KEY=$key")
for v in REACH_SECURITY_PROTOCOL REACH_SASL_MECHANISM REACH_SASL_USERNAME REACH_SASL_PASSWORD; do
  [ -n "${!v:-}" ] && common+=(-e "$v")
done
started=()
cleanup() {
  for c in "${started[@]}"; do
    if [ "${failed:-}" = 1 ]; then echo "--- $c"; docker logs --tail 40 "$c" 2>&1; fi
    docker rm -f "$c" >/dev/null 2>&1 || true
  done
}
trap 'failed=1' ERR
trap cleanup EXIT
start() { local name="reach-$1-$run_id"; shift; docker run -d --name "$name" "${common[@]}" "$IMAGE" "$@" >/dev/null; started+=("$name"); }

docker run --rm "${common[@]}" "$IMAGE" topics apply >/dev/null  # as the chart's pre-install Job does
start router router --role all
start agent agent run examples.echo_agent:agent
start gateway gateway --host 127.0.0.1 --port "$gw_port"

# the app, made with the image's own CLI (the same at-rest key as the gateway)
app=$(docker run --rm "${common[@]}" "$IMAGE" apps create image-test --json)
REACH_NAMESPACE=$ns APP="$app" GW="http://127.0.0.1:$gw_port" WEB="http://127.0.0.1:$web_port" $PY - <<'PY'
import json, os, sys, time, urllib.request
from reach.tooling.bench.gateway_stack import SignedApp, envelope_body, post

made = json.loads(os.environ["APP"])
app = SignedApp(app_id=made["app_id"], key_id=made["key_id"], secret=made["secret"])


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except Exception as exc:  # not up yet
        return getattr(exc, "code", 0), {}


deadline = time.monotonic() + 240
for what in ("WEB", "GW"):
    while get(os.environ[what] + "/healthz")[0] != 200:
        if time.monotonic() > deadline:
            sys.exit(f"image-test: {what} /healthz never answered 200")
        time.sleep(1)
body = envelope_body("demo.echo", {"text": "from the image"})
while True:  # 404 until the gateway has read the echo agent's registration
    status, answer = post(os.environ["GW"] + "/v1/envelopes", body, app.headers(body))
    if status == 202:
        break
    if time.monotonic() > deadline:
        sys.exit(f"image-test: POST /v1/envelopes answered {status} {answer[:300]!r}")
    time.sleep(1)
message_id = json.loads(answer)["message_id"]
target = f"/v1/messages/{message_id}"
while True:
    status, row = get(os.environ["GW"] + target, app.headers(b"", method="GET", target=target))
    if row.get("status") == "COMPLETED":
        print(f"image-test: {message_id} COMPLETED through the image's router, gateway and echo agent")
        break
    if time.monotonic() > deadline:
        sys.exit(f"image-test: {message_id} is {status} {row}")
    time.sleep(1)
PY
