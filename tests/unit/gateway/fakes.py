"""In-memory stand-ins for the gateway's dependencies (apps, nonces, quotas, broker, replies, status, registry);
the signature check itself is the real SignatureAuthenticator over the in-memory directory and nonces."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from fastapi.testclient import TestClient

from reach import signing
from reach.callers import CallerApp, KeyEntry
from reach.channels.settings import ClosureSettings
from reach.core.tokenbucket import TokenBucket
from reach.envelopes import now_ms
from reach.errors import InfraUnavailable
from reach.gateway.auth import SignatureAuthenticator
from reach.gateway.deps import Dependencies, Remembered
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.ports import QuotaDecision
from reach.gateway.publisher import BrokerRefused
from reach.gateway.routes_status import unknown_message, unknown_trace
from reach.gateway.service import build_gateway
from reach.records import Capability, Envelope, Receipt, Status
from reach.streams.status import tenants
from reach.tooling.local.process import free_port


def sign(secret: bytes, body: bytes, *, method: str = "POST", target: str = "/v1/envelopes", t: int | None = None,
         nonce: str | None = None) -> str:
    """`Reach-Signature` v2 as a caller computes it (reach.signing), timestamped now and with a fresh nonce by
    default."""
    return signing.sign_request(secret, method=method, target=target, body=body,
                                t=int(time.time()) if t is None else t, nonce=nonce or uuid.uuid4().hex)


def signed_get(client: TestClient, path: str, *, key: str = "key1", secret: bytes = b"secret-1",
               headers: dict[str, str] | None = None) -> httpx.Response:
    """A GET signed as the gateway wants it: Reach-Signature over GET, the path and the empty body."""
    signature = sign(secret, b"", method="GET", target=path)
    return client.get(path, headers={"Reach-Key": key, "Reach-Signature": signature, **(headers or {})})


class FakeDirectory:
    """Live keys by key id, in memory (the real one follows the apps topic)."""

    def __init__(self, keys: Sequence[KeyEntry]) -> None:
        self.keys = {k.key_id: k for k in keys}
        self.alive = True

    def lookup(self, key_id: str) -> KeyEntry | None:
        return self.keys.get(key_id)


class FakeNonces:
    """Nonces seen, in memory (the real store is Redis SET NX with a TTL)."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, str]] = set()

    async def claim(self, key_id: str, nonce: str, ttl_s: int) -> bool:
        if (key_id, nonce) in self.seen:
            return False
        self.seen.add((key_id, nonce))
        return True

    async def release(self, key_id: str, nonce: str) -> None:
        self.seen.discard((key_id, nonce))


class FakeQuotas:
    """A token bucket per app (rate, burst), as the shared Redis one behaves on one replica."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, read_rate: float = 1000.0,
                 read_burst: int = 1000) -> None:
        self.clock = clock
        self.buckets: dict[str, TokenBucket] = {}
        self.reads: dict[str, TokenBucket] = {}
        self.read_shape = (read_rate, read_burst)
        self.taken = 0
        self.read_tokens = 0  # read tokens asked for (taken or not)
        self.capabilities: list[str] = []  # the capability of every write token taken

    async def take_read(self, app: CallerApp, cost: int = 1) -> QuotaDecision:
        rate, burst = self.read_shape
        self.read_tokens += min(cost, burst)
        wait = self.reads.setdefault(app.app_id, TokenBucket(rate=rate, burst=burst)).take(self.clock(),
                                                                                          min(cost, burst))
        return QuotaDecision(True) if wait == 0.0 else QuotaDecision(False, retry_after_s=wait, scope="read")

    async def take(self, app: CallerApp, capability: str) -> QuotaDecision:
        bucket = self.buckets.setdefault(app.app_id, TokenBucket(rate=app.rate, burst=app.burst))
        wait = bucket.take(self.clock())
        if wait == 0.0:
            self.taken += 1
            self.capabilities.append(capability)
            return QuotaDecision(True)
        return QuotaDecision(False, retry_after_s=wait, scope="app")


class FakePublisher:
    """Records what reached "the broker"; `fail` makes the next publishes go unacknowledged."""

    def __init__(self) -> None:
        self.sent: list[Envelope] = []
        self.fail = False
        self.refuse = False  # the broker refuses the record (as MSG_SIZE_TOO_LARGE under a topic's max.message.bytes)
        self.on_publish: Callable[[Envelope], None] | None = None

    async def publish(self, envelope: Envelope) -> None:
        await asyncio.sleep(0)
        if self.fail:
            raise InfraUnavailable("no acknowledgement (fake)")
        if self.refuse:
            raise BrokerRefused("the broker refused the envelope: MSG_SIZE_TOO_LARGE (fake)")
        self.sent.append(envelope)
        if self.on_publish is not None:
            self.on_publish(envelope)

    def healthy(self) -> bool:
        return True


@dataclass
class _FakeWaiter:
    replies: FakeReplies
    key: tuple[str, int]
    future: asyncio.Future[Receipt]
    endings: list[Receipt] = field(default_factory=list)

    async def result(self, timeout_s: float) -> Receipt | None:
        try:
            receipt = await asyncio.wait_for(self.future, timeout_s)
            self.endings.append(receipt)
            return receipt
        except TimeoutError:
            return None
        finally:
            self.cancel()

    def cancel(self) -> None:
        self.replies.waiting.pop(self.key, None)


class FakeReplies:
    """A reply topic: `deliver(receipt)` resolves whoever expects it."""

    topic = "test.replies.gw"

    def __init__(self) -> None:
        self.waiting: dict[tuple[str, int], asyncio.Future[Receipt]] = {}

    def expect(self, message_id: str, generation: int = 0) -> _FakeWaiter:
        future: asyncio.Future[Receipt] = asyncio.get_running_loop().create_future()
        self.waiting[(message_id, generation)] = future
        return _FakeWaiter(self, (message_id, generation), future)

    def deliver(self, receipt: Receipt) -> None:
        future = self.waiting.get((receipt.message_id, receipt.generation))
        if future is not None and not future.done():
            future.set_result(receipt)

    def healthy(self) -> bool:
        return True


class FakeStatus:
    """Status rows by id; `script[id]` is a list of rows served one per read (the last one repeats)."""

    def __init__(self) -> None:
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.traces: dict[str, list[str]] = {}
        self.tenant_queries: list[dict[str, str]] = []
        self.reads = 0

    async def message(self, message_id: str) -> tuple[int, dict[str, Any]]:
        self.reads += 1
        script = self.rows.get(message_id)
        if not script:
            return unknown_message(message_id)
        return 200, script.pop(0) if len(script) > 1 else script[0]

    async def trace(self, trace_id: str) -> tuple[int, dict[str, Any]]:
        ids = self.traces.get(trace_id)
        if not ids:
            return unknown_trace(trace_id)
        return 200, {"trace_id": trace_id, "message_ids": ids}

    async def tenant_tasks(self, tenant: str, query: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        """The stream app's tenant index over the rows held here (reach.streams.status.tenants)."""
        self.tenant_queries.append(dict(query))
        hits = [tenants.Hit(int(row.get("updated_at") or 0), mid, str(row.get("status", "")), str(row.get("trace_id")))
                for mid, script in self.rows.items() if script for row in script[:1] if row.get("tenant") == tenant]
        return tenants.answer(tenant, hits, tenants.query_of(query))


class FakeCatalog:
    """Live capability versions, set by the test."""

    def __init__(self, capabilities: Sequence[Capability] = (), depends: Mapping[str, Sequence[str]] | None = None
                 ) -> None:
        self.capabilities = list(capabilities)
        self.depends = dict(depends or {})

    def versions(self, capability: str, tenant: str, now_ms: int) -> Sequence[Capability]:
        return [c for c in self.capabilities if c.name == capability]

    def live_capabilities(self, tenant: str | None, now_ms: int) -> Sequence[Capability]:
        return list(self.capabilities)

    def dependencies(self, now_ms: int) -> Mapping[str, Sequence[str]]:
        return self.depends

    def healthy(self) -> bool:
        return True


class FakeIdempotency:
    """The Redis mapping as a dict (no TTL: tests run well inside any window)."""

    def __init__(self) -> None:
        self.keys: dict[tuple[str, str], Remembered] = {}

    async def claim(self, app_id: str, key: str, ids: Remembered, ttl_s: int) -> Remembered | None:
        if (app_id, key) in self.keys:
            return self.keys[(app_id, key)]
        self.keys[(app_id, key)] = ids
        return None

    async def accepted(self, app_id: str, key: str, ids: Remembered, ttl_s: int) -> None:
        self.keys[(app_id, key)] = ids

    async def release(self, app_id: str, key: str) -> None:
        self.keys.pop((app_id, key), None)


def app(app_id: str = "app1", *, capabilities: tuple[str, ...] = (), rate: float = 1000.0, burst: int = 1000,
        tenant: str = "acme") -> CallerApp:
    return CallerApp(app_id=app_id, name=app_id, tenant=tenant, capabilities=capabilities, rate=rate, burst=burst)


class FakeTurns:
    """reach.ops.turns.TurnStore in memory: inbox records by position, claims, what was published."""

    def __init__(self) -> None:
        self.inbox: dict[tuple[str, int, int], bytes] = {}
        self.claims: set[tuple[str, int]] = set()
        self.receipts: list[Receipt] = []
        self.envelopes: list[Envelope] = []
        self.order: list[str] = []  # "receipt:<STATUS>" / "envelope", in the order they were produced
        self.fail_receipts = 0  # the next this many receipts are not acknowledged
        self.fail_envelope = False

    @property
    def published(self) -> list[tuple[Envelope, Receipt]]:
        """Each next turn published: its envelope with the ACCEPTED receipt of its generation."""
        accepted = {r.generation: r for r in self.receipts if r.status is Status.ACCEPTED}
        return [(e, accepted[e.generation]) for e in self.envelopes]

    async def envelope_at(self, topic: str, partition: int, offset: int) -> bytes | None:
        return self.inbox.get((topic, partition, offset))

    async def claim(self, message_id: str, generation: int, ttl_ms: int) -> bool:
        if (message_id, generation) in self.claims:
            return False
        self.claims.add((message_id, generation))
        return True

    async def release(self, message_id: str, generation: int) -> None:
        self.claims.discard((message_id, generation))

    async def record(self, receipt: Receipt) -> None:
        if self.fail_receipts:
            self.fail_receipts -= 1
            raise InfraUnavailable("receipt not acknowledged (test)")
        self.order.append(f"receipt:{receipt.status.value}")
        self.receipts.append(receipt)

    async def publish(self, envelope: Envelope) -> None:
        if self.fail_envelope:
            raise InfraUnavailable("envelope not acknowledged (test)")
        self.order.append("envelope")
        self.envelopes.append(envelope)


@dataclass
class Fakes:
    """One of each fake, and the Dependencies built over them."""

    keys: list[KeyEntry] = field(default_factory=lambda: [KeyEntry("key1", app(), b"secret-1")])
    catalog: FakeCatalog = field(default_factory=lambda: FakeCatalog([echo_capability()]))
    publisher: FakePublisher = field(default_factory=FakePublisher)
    replies: FakeReplies = field(default_factory=FakeReplies)
    status: FakeStatus = field(default_factory=FakeStatus)
    idempotency: FakeIdempotency = field(default_factory=FakeIdempotency)
    quotas: FakeQuotas = field(default_factory=FakeQuotas)
    turns: FakeTurns = field(default_factory=FakeTurns)

    def __post_init__(self) -> None:
        self.directory = FakeDirectory(self.keys)
        self.nonces = FakeNonces()
        self.authenticator = SignatureAuthenticator(directory=self.directory, nonces=self.nonces)

    def deps(self) -> Dependencies:
        return Dependencies(authenticator=self.authenticator, quotas=self.quotas, publisher=self.publisher,
                            replies=self.replies, status=self.status, catalog=self.catalog,
                            idempotency=self.idempotency, clock_ms=now_ms, turns=self.turns)


ECHO_SCHEMA = '{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}'


def echo_capability(version: str = "1.0.0", schema: str = ECHO_SCHEMA) -> Capability:
    return Capability(name="demo.echo", version=version, input_schema=schema)


@dataclass
class Streamed:
    """What a raw ASGI call answered, and how many body chunks the app pulled from the caller."""

    status: int
    body: bytes
    reads: int


def stream_body(app: Any, method: str, path: str, headers: dict[str, str], *, chunk: bytes = b"x" * 65536,
                chunks: int = 1000) -> Streamed:
    """One request whose body arrives in `chunks` chunks (no Content-Length), counting the chunks the app reads:
    a test of what the door refuses before (or while) reading a body TestClient would hand over whole."""
    reads = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        return {"type": "http.request", "body": chunk, "more_body": reads < chunks}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
             "server": ("testserver", 80), "client": ("testclient", 1)}
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return Streamed(status=int(start["status"]), body=body, reads=reads)


LOOPBACK = ("127.0.0.1", 50000)  # a TestClient peer on the loopback interface: /metrics answers it without a token


@asynccontextmanager
async def served(fakes: Fakes, settings: HttpSettings, **deps: Any) -> AsyncIterator[str]:
    """The gateway on a loopback uvicorn; yields its base URL."""
    built = dataclasses.replace(fakes.deps(), directory=fakes.directory, **deps)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(build_gateway(built, settings, closure=ClosureSettings()),
                                           host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
