"""Test-only: `python -m tests.integration.gateway_launcher --port P` runs the real gateway process (real Kafka,
Redis, status views) with in-memory apps and quotas ONLY, read from REACH_TEST_GATEWAY_APPS (JSON list of
{key_id, secret, app_id, tenant, capabilities, rate, burst})."""

from __future__ import annotations

import argparse
import json
import os

from reach.gateway.ports import CallerApp, KeyEntry
from reach.gateway.server import serve
from reach.gateway.wiring import Guards
from tests.unit.gateway.fakes import FakeAuthenticator, FakeQuotas


def keys_from_env() -> list[KeyEntry]:
    out = []
    for spec in json.loads(os.environ["REACH_TEST_GATEWAY_APPS"]):
        app = CallerApp(app_id=spec["app_id"], name=spec["app_id"], tenant=spec.get("tenant", "default"),
                        capabilities=tuple(spec.get("capabilities", ())), rate=spec.get("rate", 1000.0),
                        burst=spec.get("burst", 1000))
        out.append(KeyEntry(spec["key_id"], app, spec["secret"].encode()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    serve(Guards(FakeAuthenticator(keys_from_env()), FakeQuotas()), host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
