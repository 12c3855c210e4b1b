"""Channel health on the real broker and Redis with the fake SMS provider: it switches to 429s, the channel goes
OPEN (on the Redis board `reach channels` reads) within 10 s, sends go to the email backup and the share of sends
DELIVERED within 10 s through one channel or the other is measured; the provider recovers and probes bring SMS
back."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from reach.channels.agent import channel_agent
from reach.channels.board import Snapshot
from reach.channels.boardread import read_board
from reach.channels.health import ChannelRules
from reach.channels.settings import ChannelSettings, ClosureSettings
from reach.client import Client
from reach.names import Names
from reach.records import Receipt, Status
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.tooling.local.process import free_port
from tests.integration.agent_support import Receipts, reach_cli, running
from tests.integration.channel_servers import FakeSms, listening
from tests.integration.router_helpers import running_router, wait_for
from tests.integration.test_channels import delays, fast_retries, serving, smtp_server

pytestmark = pytest.mark.integration
SENDS = 60
WITHIN_MS = 10_000


def delivered_at(receipts: dict[str, list[Receipt]], message_id: str) -> int | None:
    """When the send was DELIVERED: by SMS on its own id, or by the email backup on `<id>-bk`."""
    times = [r.at for m in (message_id, message_id + "-bk") for r in receipts.get(m, [])
             if r.status is Status.DELIVERED]
    return min(times) if times else None


def _board() -> list[Snapshot]:
    """The board as `reach channels` reads it."""
    return read_board(RedisSettings(), ReachSettings().namespace)


def test_sms_429s_open_the_channel_sends_go_to_the_backup_and_probes_bring_it_back(
        namespace: str, tmp_path: Path) -> None:
    rules = ChannelRules(open_ms=2_000, probe_every_ms=200, probes=3)  # OPEN 30 s / probe 30 s in production
    names = Names(ReachSettings().namespace)
    with listening(FakeSms()) as provider, smtp_server() as (inbox, port):
        sms = channel_agent("sms", settings=ChannelSettings(sms_url=f"{provider.url}/api", sms_poll_s=0.05,
                                                            timeout_s=2), health=rules,
                            board_interval_s=1.0, metrics_port=(metrics_port := free_port()), kafka=KafkaSettings(),
                            redis=RedisSettings(), reach=ReachSettings(), closure=ClosureSettings())
        mail = channel_agent("email", settings=ChannelSettings(smtp_host="127.0.0.1", smtp_port=port, timeout_s=5),
                             kafka=KafkaSettings(), redis=RedisSettings(), reach=ReachSettings(),
                             closure=ClosureSettings())
        fast_retries("channel.sms", 5)
        receipts = Receipts(names.receipts)
        request = {"endpoint": "+15551234567", "backup": {"channel": "email", "endpoint": "ops@example.com"}}
        try:
            with running_router() as router, delays(), running(sms), running(mail), Client() as client:
                wait_for(lambda: serving(router, "channel.sms", "channel.email"), 60, "sms and email agents READY")
                first = client.send("channel.sms", {**request, "body": {"text": "warm-up"}})
                receipts.wait_status([first], Status.DELIVERED, timeout=60)

                provider.mode = "429"
                storm = int(time.time() * 1000)
                sent: dict[str, int] = {}
                for n in range(SENDS):
                    mid = client.send("channel.sms", {**request, "body": {"text": f"n{n}"}})
                    sent[mid] = int(time.time() * 1000)
                    time.sleep(0.05)  # a steady 20 sends/s, as a provider's client would see them
                board = wait_for(lambda: [s for s in _board() if s.channel == "sms" and s.state == "OPEN"], 10,
                                 "the sms channel OPEN on the board")
                opened_s = (board[0].since - storm) / 1000
                assert board[0].instance_id == sms.instance_id and board[0].reason
                assert 0 < opened_s <= 10, opened_s  # the bound: OPEN within 10 s of the first 429
                shown = json.loads(reach_cli("channels", "--json").stdout)
                assert any(r["channel"] == "sms" and r["state"] == "OPEN" for r in shown), shown
                gauges = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
                assert f'agentreach_channel_state{{channel="sms",instance_id="{sms.instance_id}"}} 2.0' in gauges

                def all_delivered() -> dict[str, int] | None:
                    seen = receipts.by_message()
                    done = {m: delivered_at(seen, m) for m in sent}
                    return {m: at for m, at in done.items() if at is not None} if None not in done.values() else None

                arrived = wait_for(all_delivered, 60, "every send DELIVERED")
                seen = receipts.by_message()
                late = {m: arrived[m] - at for m, at in sent.items() if arrived[m] - at > WITHIN_MS}
                share = 1 - len(late) / SENDS
                by_sms = sum(1 for m in sent if any(r.status is Status.DELIVERED for r in seen.get(m, [])))
                print(f"\nOPEN {opened_s:.1f} s after the provider's first 429; delivered within 10 s: "
                      f"{share:.1%} of {SENDS} ({by_sms} by sms, {SENDS - by_sms} by email; late: {late})")
                assert share > 0.97, (share, late)
                assert len(inbox.messages) >= SENDS - by_sms

                provider.mode = "ok"  # recovers: after OPEN, real sends probe it; 3 passes close the channel

                by_sms_again: list[str] = []

                def healthy_again() -> bool:
                    mid = client.send("channel.sms", {**request, "body": {"text": "after"}})
                    got = receipts.wait_status([mid], Status.COMPLETED, timeout=30)[mid]
                    if any(r.status is Status.DELIVERED for r in got):
                        by_sms_again.append(mid)
                    return any(s.channel == "sms" and s.state == "HEALTHY" for s in _board())

                wait_for(healthy_again, 40, "the sms channel HEALTHY on the board again", interval=0.2)
                assert len(by_sms_again) >= rules.probes  # the passing probes were real SMS sends
        finally:
            receipts.close()
