"""The ready queries docs/queries/callback_effective.sql and closure.sql on a known run: the counts they give."""

from __future__ import annotations

from pathlib import Path

from reach import analytics
from reach.records import ChannelDelivery, Receipt, Status

QUERIES = Path(__file__).resolve().parents[3] / "docs" / "queries"
SPEC = '{"channel":"webhook","endpoint":"https://x.test/h","fields":[]}'
HOUR = 3_600_000


def receipt(mid: str, status: Status, at: int, *, capability: str = "demo.echo", trace: str = "t",
            callback: str | None = None, channel: str | None = None) -> Receipt:
    info = ChannelDelivery(channel=channel, provider_message_id="p") if channel else None
    return Receipt(message_id=mid, trace_id=trace, tenant="acme", capability=capability, status=status, at=at,
                   callback=callback, channel=info)


def known_run() -> list[Receipt]:
    """10 messages with a callback, 9 called back; 8 outbound webhooks, 6 answered in time and 1 a day late."""
    out: list[Receipt] = []
    for n in range(10):
        mid, trace = f"m{n}", f"t{n}"
        out.append(receipt(mid, Status.COMPLETED, 1_000, callback=SPEC, trace=trace))
        if n < 9:
            out.append(receipt(mid, Status.CALLBACKED, 2_000, trace=trace, channel="webhook"))
        if n < 8:
            out.append(receipt(f"{mid}-cb0", Status.SENT, 1_500, capability="channel.webhook", trace=trace,
                               channel="webhook"))
        if n < 6:
            out.append(receipt(f"{mid}-cb0-re", Status.COMPLETED, 5_000, capability="support.answer", trace=trace))
        if n == 6:
            out.append(receipt(f"{mid}-cb0-re", Status.COMPLETED, 1_500 + 25 * HOUR, capability="support.answer",
                               trace=trace))
    out.append(receipt("plain", Status.COMPLETED, 1_000))  # no callback: in neither denominator
    return out


def run(name: str, tmp_path: Path) -> list[tuple[object, ...]]:
    con = analytics.load(iter(analytics.flatten(r) for r in known_run()), tmp_path)
    return analytics.query(con, (QUERIES / name).read_text())[1]


def test_callback_effective_rate(tmp_path: Path) -> None:
    assert run("callback_effective.sql", tmp_path) == [("demo.echo", 10, 9, 0.9)]


def test_closure_rate(tmp_path: Path) -> None:
    assert run("closure.sql", tmp_path) == [("channel.webhook", 8, 6, 0.75)]


def test_delivery_states_per_channel(tmp_path: Path) -> None:
    """4 emails sent: 3 delivered, 1 bounced (after its DELIVERED: the SMTP server took it); 2 IMs, 1 read twice."""
    out: list[Receipt] = []
    for n in range(4):
        out += [receipt(f"e{n}", Status.SENT, 1_000, capability="channel.email", channel="email"),
                receipt(f"e{n}", Status.DELIVERED, 1_000, capability="channel.email", channel="email")]
    out.append(receipt("e3", Status.BOUNCED, 9_000, capability="channel.email", channel="email"))
    for n in range(2):
        out += [receipt(f"i{n}", Status.SENT, 1_000, capability="channel.im", channel="im"),
                receipt(f"i{n}", Status.DELIVERED, 1_000, capability="channel.im", channel="im")]
    out += [receipt("i0", Status.READ, 5_000, capability="channel.im", channel="im"),
            receipt("i0", Status.READ, 6_000, capability="channel.im", channel="im")]
    con = analytics.load(iter(analytics.flatten(r) for r in out), tmp_path)
    rows = analytics.query(con, (QUERIES / "delivery_states.sql").read_text())[1]
    assert rows == [("channel.email", 4, 4, 0, 1, 1.0, 0.0, 0.25), ("channel.im", 2, 2, 1, 0, 1.0, 0.5, 0.0)]
