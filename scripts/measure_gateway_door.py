"""Measures the door: signature verify cost, Redis quota/nonce latency, revoke-to-gone in the directory.

Run from the repository root with REACH_BOOTSTRAP and REACH_REDIS_URL set (docs/decisions/0007-gateway-apps.md).
"""
import os, statistics, tempfile, time, timeit, uuid
from pathlib import Path
from reach import clients, topics
from reach.names import Names
from reach.gateway import signing
from reach.gateway.appstore import AppStore, KafkaAppLog
from reach.gateway.directory import KafkaAppDirectory
from reach.gateway.secrets import secret_box
from reach.gateway.quotas import RedisQuotas
from reach.gateway.nonces import RedisNonceStore
from reach.gateway.redisconn import door_client
from reach.gateway.ports import CallerApp

body = b'{"capability":"search.web","payload":{"q":"kafka"}}' * 4
h = signing.sign(b"rs_secret", body, int(time.time()), "n-0123456789")
n = 20000
t = timeit.timeit(lambda: signing.verify(b"rs_secret", h, body, now=int(time.time())), number=n)
print(f"verify: {t / n * 1e6:.1f} us per call ({len(body)} B body)")

ns = "m" + uuid.uuid4().hex[:8]
spec = topics.load(Path("topics.yaml")); admin = clients.admin()
topics.apply(admin, topics.plan(admin, spec.resolved(Names(ns))))
client = door_client(os.environ["REACH_REDIS_URL"])
q = RedisQuotas(client=client, namespace=ns); nonces = RedisNonceStore(client=client, namespace=ns)
app = CallerApp(app_id="app_m", name="m", tenant="t", capabilities=(), rate=1e9, burst=10**9)
lat = []
for _ in range(3000):
    s = time.perf_counter(); q.take(app, "search.web"); lat.append(time.perf_counter() - s)
lat.sort(); print(f"RedisQuotas.take: p50 {lat[1500]*1e3:.3f} ms p99 {lat[2970]*1e3:.3f} ms (3000 calls)")
lat = []
for i in range(3000):
    s = time.perf_counter(); nonces.claim("app_m", f"n-{i:08}", 360); lat.append(time.perf_counter() - s)
lat.sort(); print(f"RedisNonceStore.claim: p50 {lat[1500]*1e3:.3f} ms p99 {lat[2970]*1e3:.3f} ms (3000 calls)")

home = Path(tempfile.mkdtemp()); box = secret_box(None, home, create=True)
store = AppStore(log=KafkaAppLog(names=Names(ns)), box=box)
d = KafkaAppDirectory(names=Names(ns), box=box); d.start()
seen = []
for _ in range(10):
    made = store.create(name="m", tenant="t", capabilities=[], rate=1, burst=1)
    while d.lookup(made.key_id) is None: time.sleep(0.005)
    store.revoke(made.app_id)  # returns once the broker acked
    s = time.perf_counter()
    while d.lookup(made.key_id) is not None: time.sleep(0.005)
    seen.append(time.perf_counter() - s)
print(f"revoke acked -> key gone from the directory: median {statistics.median(seen)*1e3:.0f} ms, max {max(seen)*1e3:.0f} ms (10 revokes)")
d.stop()
admin.delete_topics([t for t in admin.list_topics(timeout=10).topics if t.startswith(ns + ".")])
