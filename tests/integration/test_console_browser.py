"""The operator console in a real browser (Playwright driving Debian's Chromium headless) against a real gateway,
stream app, broker, Redis and agents: one stack for the module, each test one page's promise, checked against the
CLI. Screenshots of every page go to test-output/console/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet

from reach.agent import Agent
from reach.client import Client
from reach.records import Status
from reach.settings import KafkaSettings
from reach.tooling.local.process import free_port
from tests.integration.agent_support import Receipts, running, spawn, wait_for
from tests.integration.conftest import Infra
from tests.integration.stream_app import ROOT, StreamApp

pytestmark = pytest.mark.integration

CHROMIUM = os.environ.get("REACH_CHROMIUM", "/usr/bin/chromium")
SHOTS = ROOT / "test-output" / "console"
ECHO = "demo.echo"


def echo_agent(version: str, cost: float) -> Agent:
    """One echo instance; `stable` (1.0.0, dear) wins on fit by default, `cheap` (1.9.0) once cost outweighs fit."""
    agent = Agent("agent://demo/echo", max_concurrency=8, cost=cost, build_version=version)

    @agent.capability(ECHO, version=version)
    async def echo(payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    return agent


@dataclass
class Stack:
    namespace: str
    stream: StreamApp
    url: str
    tokens: dict[str, str]
    stable: Agent
    cheap: Agent
    receipts: Receipts
    client: Client


def cli(*args: str) -> Any:
    """`reach ARGS` in this process (typer's runner: the real commands without a Python start-up each, which
    costs seconds on a loaded machine); its JSON output."""
    from typer.testing import CliRunner

    from reach.cli import app

    done = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def _fresh_namespace(infra: Infra, mp: pytest.MonkeyPatch) -> str:
    from reach.kafka import clients, topics
    from reach.names import Names

    ns = "t" + uuid.uuid4().hex[:10]
    for name, value in {"REACH_NAMESPACE": ns, "REACH_BOOTSTRAP": infra.bootstrap, "REACH_REDIS_URL": infra.redis_url,
                        "REACH_TOPICS_FILE": str(ROOT / "topics.yaml"),
                        "REACH_GATEWAY_SECRETS_KEY": Fernet.generate_key().decode(),
                        # the flaky agent fails 9 attempts on purpose: no breaker or ejection may hide it
                        "REACH_HEALTH_MIN_CALLS": "1000", "REACH_HEALTH_EJECT_MIN_CALLS": "1000"}.items():
        mp.setenv(name, value)
    admin = clients.admin(KafkaSettings())
    topics.apply(admin, topics.plan(admin, topics.load(ROOT / "topics.yaml").resolved(Names(ns))))
    return ns


def _drop_namespace(ns: str) -> None:
    from reach.kafka import clients

    admin = clients.admin(KafkaSettings())
    mine = [t for t in admin.list_topics(timeout=10).topics if t.startswith(f"{ns}.")]
    for future in (admin.delete_topics(mine, operation_timeout=30).values() if mine else []):
        try:
            future.result(timeout=30)
        except Exception:  # noqa: BLE001 - cleanup never fails a test
            pass


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def stack(infra: Infra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("console")
    with pytest.MonkeyPatch.context() as mp, ExitStack() as cleanup:
        ns = _fresh_namespace(infra, mp)
        cleanup.callback(_drop_namespace, ns)
        stream = StreamApp(logs)
        mp.setenv("REACH_WEB_PORT", str(stream.port))
        made = {role: cli("operators", "create", f"{role}-1", "--role", role, "--json")
                for role in ("admin", "viewer")}  # before the gateway starts: its directory reads them too
        tokens = {role: str(m["token"]) for role, m in made.items()}
        tokens["viewer_id"] = str(made["viewer"]["operator_id"])
        cleanup.callback(_stop, spawn("examples.flaky_agent:agent"))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = cleanup.enter_context(open(logs / "gateway.log", "wb"))
        gateway = subprocess.Popen([sys.executable, "-m", "reach", "gateway", "--port", str(port)], cwd=ROOT,
                                   env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT)
        cleanup.callback(_stop, gateway)
        stable, cheap = echo_agent("1.0.0", cost=1.0), echo_agent("1.9.0", cost=0.1)
        cleanup.enter_context(running(stable))
        cleanup.enter_context(running(cheap))
        cleanup.callback(stream.stop)
        stream.start()  # the router, the gateway and the three agents start side by side

        def gateway_up() -> bool:
            if gateway.poll() is not None:
                raise AssertionError(f"gateway exited: {(logs / 'gateway.log').read_text()[-3000:]}")
            try:
                return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        receipts = Receipts(f"{ns}.receipts")
        cleanup.callback(receipts.close)
        client = cleanup.enter_context(Client())
        wait_for(gateway_up, 60, "the gateway's /healthz", interval=0.2)
        wait_for(lambda: len([a for a in stream.get("/agents") if a["state"] == "READY"]) == 3, 60,
                 "both echo instances and the flaky agent READY in the router's registry", interval=0.2)
        yield Stack(ns, stream, url, tokens, stable, cheap, receipts, client)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        message = f"no Chromium at {CHROMIUM}: apt-get install -y chromium (.ci/run does)"
        if os.environ.get("REACH_CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def admin(browser: Any, stack: Stack) -> Any:
    """One logged-in admin page for the module (each test navigates it)."""
    return _logged_in(browser, stack, "admin")


def _logged_in(browser: Any, stack: Stack, role: str) -> Any:
    page = browser.new_context(base_url=stack.url).new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # the confirmations
    page.goto("/console/login")
    page.fill("#token", stack.tokens[role])
    page.click("#login")
    page.wait_for_url("**/console")
    return page


def _shot(page: Any, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def _sql(since: int, until: int, statement: str) -> list[dict[str, Any]]:
    return list(cli("receipts", "sql", "--since", str(since), "--until", str(until), "--format", "json", statement))


def _send(stack: Stack, count: int, capability: str = ECHO, payload: dict[str, Any] | None = None,
          **options: Any) -> list[str]:
    """`count` messages; echo asks for ^1, so version closeness (fit) prefers the 1.0.0 instance."""
    if capability == ECHO:
        options.setdefault("version", "^1")
    return [stack.client.send(capability, {"n": n, **(payload or {})}, **options) for n in range(count)]


def test_nothing_is_reachable_without_a_token_and_a_viewer_cannot_act(stack: Stack, browser: Any) -> None:
    anonymous = httpx.Client(base_url=stack.url, follow_redirects=False)
    for path in ("/console", "/console/agents", "/console/messages", "/console/dead-letters", "/console/routing"):
        resp = anonymous.get(path)
        assert resp.status_code == 303 and resp.headers["location"] == "/console/login", path
    for path in ("/console/api/overview", "/console/api/agents", "/console/api/dead-letters", "/console/api/weights"):
        assert anonymous.get(path).status_code == 401, path
    assert anonymous.post("/console/api/agents/action", json={"instance_id": "x", "action": "drain"}).status_code == 401

    page = browser.new_context(base_url=stack.url).new_page()
    page.goto("/console/routing")
    assert page.url.endswith("/console/login")
    _shot(page, "login")

    viewer = _logged_in(browser, stack, "viewer")
    viewer.goto("/console/agents")
    row = viewer.locator(f"tr[data-instance='{stack.cheap.instance_id}']")
    with viewer.expect_response("**/console/agents/action") as answer:
        row.locator("button.drain").click()
    assert answer.value.status == 403
    assert "viewer" in viewer.locator("#error").inner_text()
    bearer = {"Authorization": f"Bearer {stack.tokens['viewer']}"}
    for path, body in (("/console/api/dead-letters/redrive", {"ids": ["0:0"]}), ("/console/api/weights", {"load": 1}),
                       ("/console/api/canaries", {"agent_id": "agent://demo/echo", "action": "rollback"})):
        assert anonymous.post(path, json=body, headers=bearer).status_code == 403, path
    assert stack.stream.get("/agents") and all(a["state"] == "READY" for a in stack.stream.get("/agents"))

    assert [o["role"] for o in cli("operators", "ls", "--json")] == ["admin", "viewer"]
    cli("operators", "revoke", stack.tokens["viewer_id"], "--json")
    wait_for(lambda: anonymous.get("/console/api/whoami", headers=bearer).status_code == 401, 10,
             "the revoked viewer's token refused", interval=0.2)


def test_overview_counts_of_a_closed_window_match_receipts_sql_and_the_trace_matches(
        stack: Stack, admin: Any) -> None:
    since = int(time.time() * 1000)
    ids = _send(stack, 8)
    stack.receipts.wait_status(ids, Status.COMPLETED, timeout=60)
    until = int(time.time() * 1000) + 1
    wait_for(lambda: time.time() * 1000 > until, 5, "the window to close")

    page = admin
    page.goto(f"/console?since={since}&until={until}")
    row = page.locator(f"tr[data-capability='{ECHO}']")
    shown = (int(row.locator(".terminal").inner_text()), int(row.locator(".completed").inner_text()))
    _shot(page, "overview")
    [counted] = _sql(since, until, "SELECT count(*) FILTER (WHERE status = 'COMPLETED') AS completed, "
                     "count(*) AS terminal FROM receipts WHERE capability = 'demo.echo' AND status IN "
                     "('COMPLETED', 'FAILED', 'REJECTED', 'UNROUTABLE', 'EXPIRED', 'DEAD_LETTERED')")
    assert shown == (counted["terminal"], counted["completed"]) == (8, 8)

    message_id = ids[3]
    page.goto("/console/messages")
    page.fill("#q", message_id)
    page.click("#find")
    section = page.locator(f"section[data-message='{message_id}']")
    steps = section.locator(".step-status").all_inner_texts()
    decision = section.locator("table.decision tr.picked")
    assert decision.count() >= 1 and section.locator("table.decision tr").count() == 3  # header + 2 candidates
    _shot(page, "message")
    trace_id = stack.stream.get(f"/messages/{message_id}")["trace_id"]
    [row_cli] = cli("trace", trace_id, "--json")["messages"]
    assert steps == [s["status"] for s in row_cli["timeline"]] and steps[-1] == "COMPLETED"


def test_a_redrive_dry_run_lists_what_the_cli_lists_and_the_redrive_completes_them(stack: Stack, admin: Any) -> None:
    # fails its 3 attempts (the "bug"); redriven, the 4th run succeeds (the "fix")
    ids = _send(stack, 3, "demo.flaky", payload={"fail_times": 3}, max_attempts=3)
    stack.receipts.wait_status(ids, Status.DEAD_LETTERED, timeout=60)
    wait_for(lambda: all(stack.stream.get(f"/messages/{m}").get("status") == "DEAD_LETTERED" for m in ids), 30,
             "DEAD_LETTERED rows")
    cli_ids = sorted(cli("dlq", "replay", "--capability", "demo.flaky", "--dry-run", "--json")["replayed_ids"])
    assert cli_ids == sorted(ids)

    page = admin
    page.goto("/console/dead-letters")
    page.fill("#capability", "demo.flaky")
    page.click("#filter")
    assert page.locator("tr.letter").count() == 3
    _shot(page, "dead-letters")
    page.click("#dry-run")
    assert sorted(page.locator("li.would").all_inner_texts()) == cli_ids
    _shot(page, "dead-letters-dry-run")
    page.fill("#rate", "50")
    page.click("#redrive")
    assert "redrove 3" in page.locator("#redriven").inner_text()
    _shot(page, "dead-letters-redriven")
    page.click("#follow")  # the outcome page refreshes itself until every message is terminal
    try:
        page.wait_for_function("document.getElementById('settled').innerText.startsWith('every')", timeout=60_000)
    except Exception as exc:  # noqa: BLE001 - say which rows did not complete
        raise AssertionError(f"{exc}: {[stack.stream.get(f'/messages/{m}') for m in ids]}") from None
    assert page.locator("tr.outcome .status").all_inner_texts() == ["COMPLETED"] * 3
    assert all(stack.stream.get(f"/messages/{m}")["status"] == "COMPLETED" for m in ids)
    _shot(page, "dead-letters-outcome")
    again = cli("dlq", "replay", "--capability", "demo.flaky", "--dry-run", "--json")
    assert again["replayed"] == 0 and again["skipped_completed"] == 3


def _picks(message_ids: list[str], stack: Stack) -> list[str]:
    seen = stack.receipts.wait_status(message_ids, Status.COMPLETED, timeout=60)
    return [next(r.decision.picked_instance for r in seen[m] if r.status is Status.ROUTED and r.decision)
            for m in message_ids]


def test_a_previewed_and_applied_weight_change_changes_picks(stack: Stack, admin: Any) -> None:
    before = _picks(_send(stack, 6), stack)
    assert before.count(stack.stable.instance_id) >= 4, before  # fit prefers 1.0.0 for ^1 ... by default

    page = admin
    page.goto("/console/routing")
    page.fill("#scope", ECHO)
    page.fill("#w-fit", "0")
    page.fill("#w-cost", "1")
    page.click("#preview")
    sampled, changed = int(page.locator("#sampled").inner_text()), int(page.locator("#changed").inner_text())
    assert sampled >= 6 and changed >= 4
    move = page.locator("tr.move").first.all_inner_texts()[0]
    assert stack.stable.instance_id in move and stack.cheap.instance_id in move
    _shot(page, "routing-preview")
    page.click("#apply")
    assert "applied" in page.locator("#done").inner_text()
    assert page.locator(f"tr[data-scope='{ECHO}']").count() == 1
    _shot(page, "routing")

    def cheap_picked() -> bool:
        return _picks(_send(stack, 1), stack) == [stack.cheap.instance_id]

    wait_for(cheap_picked, 30, "the router to apply the new weights", interval=0.2)
    assert set(_picks(_send(stack, 5), stack)) == {stack.cheap.instance_id}


def test_drain_from_the_agents_page_drains_the_instance(stack: Stack, admin: Any) -> None:
    page = admin
    page.goto("/console/agents")
    _shot(page, "agents")
    page.locator(f"tr[data-instance='{stack.cheap.instance_id}'] button.drain").click()
    assert f"DRAIN {stack.cheap.instance_id}" in page.locator("#done").inner_text()

    def drained() -> bool:
        listed = stack.stream.get("/agents")
        return all(a["instance_id"] != stack.cheap.instance_id or a["state"] != "READY" for a in listed)

    wait_for(drained, 30, "the instance to leave READY in the router's registry", interval=0.2)
    page.goto("/console/agents")
    row = page.locator(f"tr[data-instance='{stack.cheap.instance_id}']")
    assert row.count() == 0 or row.locator(".state").inner_text() != "READY"
    _shot(page, "agents-drained")
    page.goto("/console/intents")  # no traffic of its own: the capability's name seeds the exact map
    assert any(ECHO in text for text in page.locator("tr.mapping").all_inner_texts())
    assert page.locator("tr[data-stage]").count() == 5  # exact, semantic, fuzzy, dual, handoff
    _shot(page, "intents")


def _new_viewer(browser: Any, stack: Stack) -> Any:
    """A page logged in as a viewer of its own (the first test revokes viewer-1), once the gateway knows it."""
    name = f"viewer-{uuid.uuid4().hex[:6]}"
    made = cli("operators", "create", name, "--role", "viewer", "--json")
    stack.tokens[name] = str(made["token"])
    bearer = {"Authorization": f"Bearer {made['token']}"}
    wait_for(lambda: httpx.get(f"{stack.url}/console/api/whoami", headers=bearer).status_code == 200, 30,
             "the gateway's operator directory to know the new viewer", interval=0.2)
    return _logged_in(browser, stack, name)


def test_the_audit_page_shows_console_changes_as_the_cli_lists_them_and_a_viewer_reads_it(
        stack: Stack, browser: Any, admin: Any) -> None:
    stable = stack.stable.instance_id
    page = admin
    page.goto("/console/agents")
    for action in ("disable", "enable"):  # stable takes work again at once: the order of the tests does not matter
        page.locator(f"tr[data-instance='{stable}'] button.{action}").click()
        assert f"{action.upper()} {stable}" in page.locator("#done").inner_text()

    def audited() -> list[dict[str, Any]] | None:
        rows = cli("audit", "--agent", stable, "--kind", "instance", "--since", "1h", "--json")
        return rows if [r["after"]["instance"]["action"] for r in rows if r["after"]][-2:] == [
            "DISABLE", "ENABLE"] else None

    listed = wait_for(audited, 60, "the audit writer to append the console's DISABLE and ENABLE", interval=0.5)
    viewer = _new_viewer(browser, stack)
    viewer.goto("/console/audit")
    viewer.fill("#agent", stable)
    viewer.select_option("#kind", "instance")
    viewer.fill("#since", "1h")
    viewer.click("#filter")
    rows = viewer.locator("tr.event")
    shown = [(rows.nth(i).locator(".kind").inner_text(), rows.nth(i).locator(".actor").inner_text(),
              json.loads(rows.nth(i).locator(".after").inner_text() or "null")) for i in range(rows.count())]
    _shot(viewer, "audit")
    assert shown == [(r["kind"], r["actor"], r["after"]) for r in reversed(listed)]  # newest first
    assert shown[0][:2] == ("INSTANCE", "console:admin-1") and shown[0][2]["instance"]["action"] == "ENABLE"
    viewer.select_option("#kind", "join")
    viewer.click("#filter")
    joined = viewer.locator("tr.event")
    assert joined.count() == 1 and joined.locator(".actor").inner_text() == stable  # the instance joined itself
    viewer.goto("/console/audit?kind=nonsense")
    assert "not an audit kind" in viewer.locator("#error").inner_text()


def _fill_policy(page: Any, scope: str, **fields: str) -> None:
    page.goto("/console/policy")
    page.fill("#scope", scope)
    for name, value in fields.items():
        page.fill(f"#p-{name}", value)
    page.click("#preview")


def test_an_admin_sets_a_policy_from_the_console_after_its_diff_and_a_viewer_is_refused(
        stack: Stack, browser: Any, admin: Any) -> None:
    viewer = _new_viewer(browser, stack)
    _fill_policy(viewer, ECHO, max_attempts="5", delivery_timeout_ms="7s")
    assert viewer.locator("tr.change").count() == 2  # a viewer may look at what a change would do
    with viewer.expect_response("**/console/policy/apply") as answer:
        viewer.click("#apply")
    assert answer.value.status == 403 and "viewer" in viewer.locator("#error").inner_text()
    _fill_policy(admin, ECHO, delivery_timeout_ms="7 parsecs")
    assert "not a duration" in admin.locator("#error").inner_text()
    assert cli("policy", "show", "--capability", ECHO, "--json")[0]["fields"]["max_attempts"]["from"] != ECHO

    page = admin
    _fill_policy(page, ECHO, max_attempts="5", delivery_timeout_ms="7s")
    diff = {page.locator("tr.change").nth(i).get_attribute("data-field"): (
        page.locator("tr.change .before").nth(i).inner_text(), page.locator("tr.change .after").nth(i).inner_text())
        for i in range(page.locator("tr.change").count())}
    assert diff == {"max_attempts": ("4", "5"), "delivery_timeout_ms": ("5s", "7s")}
    _shot(page, "policy-preview")
    page.click("#apply")
    assert f"policy of {ECHO} applied" in page.locator("#done").inner_text()
    _shot(page, "policy")
    fields = cli("policy", "show", "--capability", ECHO, "--json")[0]["fields"]
    assert (fields["max_attempts"]["value"], fields["max_attempts"]["from"]) == (5, ECHO)
    assert fields["delivery_timeout_ms"]["value"] == 7_000
    assert page.locator(f"table.policy[data-scope='{ECHO}'] tr[data-field='max_attempts'] .value").inner_text() == "5"

    [event] = wait_for(lambda: cli("audit", "--kind", "policy", "--agent", f"POLICY:{ECHO}", "--since", "1h",
                                   "--json"), 60, "the policy change in the audit history", interval=0.5)
    assert (event["actor"], event["before"], event["after"]["policy"]["max_attempts"]) == ("console:admin-1", None, 5)


def test_an_admin_starts_a_canary_from_the_routing_page_and_a_viewer_is_refused(
        stack: Stack, browser: Any, admin: Any) -> None:
    def start(page: Any) -> None:
        page.goto("/console/routing")
        page.select_option("#c-agent", "agent://demo/echo")
        page.fill("#c-version", "1.9.0")  # the cheap instance's build
        page.fill("#c-steps", "50,100")
        page.click("#canary-start-button")

    viewer = _new_viewer(browser, stack)
    with viewer.expect_response("**/console/routing/canary/start") as answer:
        start(viewer)
    assert answer.value.status == 403 and "viewer" in viewer.locator("#error").inner_text()
    assert cli("canary", "status", "--json") == []

    start(admin)
    assert "canary of 1.9.0 started for agent://demo/echo at 50%" in admin.locator("#done").inner_text()
    _shot(admin, "routing-canary")
    [running] = cli("canary", "status", "--json")
    assert (running["version"], running["state"], running["steps"]) == ("1.9.0", "RUNNING", [50, 100])
    [event] = wait_for(lambda: [e for e in cli("audit", "--kind", "canary", "--since", "1h", "--json")
                                if e["actor"] == "console:admin-1"], 60, "the canary start in the audit history",
                       interval=0.5)
    assert (event["before"], event["after"]["canary"]["version"]) == (None, "1.9.0")
    admin.locator("#canaries button", has_text="rollback").click()  # leave the stack as it was
    assert "ROLLED_BACK" in admin.locator("#done").inner_text()


def test_an_admin_creates_an_app_and_changes_its_quota_from_the_console_and_a_viewer_is_refused(
        stack: Stack, browser: Any, admin: Any) -> None:
    name = f"shop-{uuid.uuid4().hex[:4]}"
    admin.goto("/console/apps")
    admin.fill("#a-name", name)
    admin.fill("#a-capabilities", ECHO)
    admin.fill("#a-rate", "10")
    admin.click("#create-app")
    app_id, secret = admin.locator("#made-app").inner_text(), admin.locator("#made-secret").inner_text()
    assert secret and secret not in json.dumps(cli("apps", "ls", "--json"))  # shown once, stored sealed
    admin.goto("/console/apps")
    assert secret not in admin.content()

    def set_quota(page: Any) -> None:
        page.goto("/console/apps")
        row = page.locator(f"tr[data-app='{app_id}']")
        row.locator(".new-rate").fill("20")
        row.locator(".new-burst").fill("40")
        row.locator("button.set-quota").click()

    viewer = _new_viewer(browser, stack)
    with viewer.expect_response("**/console/apps/quota") as answer:
        set_quota(viewer)
    assert answer.value.status == 403 and "viewer" in viewer.locator("#error").inner_text()

    set_quota(admin)
    assert "20/s, burst 40" in admin.locator("#done").inner_text()
    _shot(admin, "apps")
    [listed] = [a for a in cli("apps", "ls", "--json") if a["app_id"] == app_id]
    assert (listed["rate"], listed["burst"], listed["updated_by"]) == (20.0, 40, "console:admin-1")
    assert (listed["name"], listed["capabilities"]) == (name, [ECHO])
    created, event = wait_for(lambda: (lambda r: r if len(r) == 2 else None)(
        [e for e in cli("audit", "--kind", "app", "--agent", app_id, "--since", "1h", "--json")
         if e["actor"] == "console:admin-1"]), 60, "the creation and the quota change in the audit history",
        interval=0.5)
    assert created["before"] is None and created["after"]["rate"] == 10.0
    assert (event["before"]["rate"], event["after"]["rate"], event["after"]["burst"]) == (10.0, 20.0, 40)


def test_an_admin_creates_and_revokes_an_operator_and_a_viewer_cannot_open_the_page(
        stack: Stack, browser: Any, admin: Any) -> None:
    viewer = _new_viewer(browser, stack)
    assert viewer.goto("/console/operators").status == 403

    name = f"night-{uuid.uuid4().hex[:4]}"
    admin.goto("/console/operators")
    admin.fill("#o-name", name)
    admin.select_option("#o-role", "viewer")
    admin.click("#create-operator")
    token = admin.locator("#token").inner_text().strip()
    _shot(admin, "operators-created")
    bearer = {"Authorization": f"Bearer {token}"}
    wait_for(lambda: httpx.get(f"{stack.url}/console/api/whoami", headers=bearer).status_code == 200, 30,
             "the new operator's token to work", interval=0.2)
    assert httpx.get(f"{stack.url}/console/api/whoami", headers=bearer).json()["role"] == "viewer"
    [made] = [o for o in cli("operators", "ls", "--json") if o["name"] == name]
    assert made["updated_by"] == "console:admin-1"

    admin.goto("/console/operators")
    admin.locator(f"tr[data-name='{name}'] button.revoke").click()
    assert f"operator {name} revoked" in admin.locator("#done").inner_text()
    wait_for(lambda: httpx.get(f"{stack.url}/console/api/whoami", headers=bearer).status_code == 401, 30,
             "the revoked token refused", interval=0.2)
    events = wait_for(lambda: (lambda r: r if len(r) >= 2 else None)(
        cli("audit", "--kind", "operator", "--agent", made["operator_id"], "--since", "1h", "--json")), 60,
        "the operator's creation and revocation in the audit history", interval=0.5)
    assert [(e["actor"], e["before"] is None) for e in events] == [("console:admin-1", True),
                                                                   ("console:admin-1", False)]


def test_an_admin_maps_and_unmaps_an_intent_from_the_console_and_a_viewer_is_refused(
        stack: Stack, browser: Any, admin: Any) -> None:
    phrase = f"say it back {uuid.uuid4().hex[:4]}"

    def map_it(page: Any) -> None:
        page.goto("/console/intents")
        page.fill("#m-phrase", phrase)
        page.fill("#m-capability", ECHO)
        page.click("#map-button")

    viewer = _new_viewer(browser, stack)
    with viewer.expect_response("**/console/intents/map") as answer:
        map_it(viewer)
    assert answer.value.status == 403 and "viewer" in viewer.locator("#error").inner_text()

    map_it(admin)
    assert f"{phrase}: (unmapped) -> {ECHO}" in admin.locator("#done").inner_text()
    row = admin.locator(f"tr.mapping[data-phrase='{phrase}']")
    assert (row.locator(".capability").inner_text(), row.locator(".source").inner_text()) == (ECHO, "operator")
    _shot(admin, "intents-mapped")
    row.locator("button.unmap").click()
    assert f"{phrase}: {ECHO} -> (unmapped)" in admin.locator("#done").inner_text()
    assert admin.locator(f"tr.mapping[data-phrase='{phrase}']").count() == 0
    events = wait_for(lambda: (lambda r: r if len(r) >= 2 else None)(
        cli("audit", "--kind", "intent", "--agent", f"INTENT:{phrase}", "--since", "1h", "--json")), 60,
        "the mapping and its removal in the audit history", interval=0.5)
    assert [(e["actor"], e["after"] is None) for e in events] == [("console:admin-1", False),
                                                                   ("console:admin-1", True)]


def test_the_message_page_follows_a_streamed_answer_to_its_end(stack: Stack, admin: Any) -> None:
    from examples.writer_agent import agent as writer_agent
    from examples.writer_agent import parts

    with running(writer_agent):
        wait_for(lambda: any(a["agent_id"] == "agent://demo/writer" and a["state"] == "READY"
                             for a in stack.stream.get("/agents")), 60, "the writer READY", interval=0.5)
        message_id = stack.client.send("demo.write", {"topic": "Kafka"})
        page = admin
        page.goto(f"/console/messages?q={message_id}")
        section = page.locator(f"section[data-message='{message_id}']")
        while not section.count():  # not folded yet: look again (bounded by the wait below)
            wait_for(lambda: stack.stream.get(f"/messages/{message_id}").get("status"), 30, "the message folded")
            page.goto(f"/console/messages?q={message_id}")
        # the page refreshes itself while the message runs: no reload here, it reaches COMPLETED on its own
        def completed() -> bool:
            try:
                steps = page.locator(f"section[data-message='{message_id}'] .step-status").all_inner_texts()
            except Exception:  # noqa: BLE001 - read while the page reloads itself: look again
                return False
            return steps[-1:] == ["COMPLETED"]

        wait_for(completed, 60, "the page to show COMPLETED", interval=0.5)
        page.wait_for_load_state()
        done = page.locator(f"section[data-message='{message_id}']")
        assert [t.strip() for t in done.locator("li.chunk").all_inner_texts()] == [p.strip() for p in parts("Kafka")]
        assert done.locator(".fraction").inner_text() == "100%"
        assert page.locator("meta[http-equiv='refresh']").count() == 0  # ended: no more refreshing
        _shot(page, "message-streamed")
