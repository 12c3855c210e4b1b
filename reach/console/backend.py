"""The console's shell over the bus: the same reads and writes the CLI makes (registry, control, dead letters,
receipts), each a blocking call the routes run on a worker thread. Pure parts live in overview and preview."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from reach import analytics, control, dlq
from reach.appstore import AppStore, KafkaAppLog
from reach.console import overview
from reach.core.views.registryview import Where
from reach.envelopes import now_ms
from reach.errors import ConfigError
from reach.intent import mappings
from reach.intent.desk import HandoffDesk
from reach.kafka import codec, topicreader, topics
from reach.kafka.codec import DecodeError
from reach.names import Names, check_capability
from reach.ops import agents as ops_agents
from reach.ops import apps as ops_apps
from reach.ops import audit as ops_audit
from reach.ops import canary as ops_canary
from reach.ops import dlq as ops_dlq
from reach.ops import handoff as ops_handoff
from reach.ops import intents as ops_intents
from reach.ops import operators as ops_operators
from reach.ops import policy as ops_policy
from reach.ops import weights as ops_weights
from reach.records import CanaryState, ControlKind, InstanceAction, Receipt
from reach.registry import read_registry
from reach.secretbox import SecretBox
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.streams import groupadmin
from reach.streams.lag import consumer_lag


class Backend(Protocol):
    """What the console's routes read and write; ConsoleBackend over Kafka, a fake in unit tests."""

    def overview(self, since_ms: int, until_ms: int, bucket_ms: int) -> dict[str, Any]: ...

    def agents(self, where: Where | None = None) -> list[dict[str, Any]]: ...

    def instance_action(self, instance_id: str, action: InstanceAction, by: str) -> None: ...

    def receipts_of(self, message_id: str, since_ms: int, until_ms: int) -> list[dict[str, Any]]: ...

    def letters(self, filters: dlq.Filters, error_code: str | None) -> list[dict[str, Any]]: ...

    def redrive(self, filters: dlq.Filters, *, dry_run: bool, rate: float | None, by: str) -> dict[str, Any]: ...

    def weights(self) -> dict[str, dict[str, Any]]: ...

    def preview(self, scope: str, changes: Mapping[str, float | None]) -> dict[str, Any]: ...

    def set_weights(self, scope: str, changes: Mapping[str, float | None], by: str) -> dict[str, float]: ...

    def canaries(self) -> list[dict[str, Any]]: ...

    def finish_canary(self, agent_id: str, state: CanaryState, by: str) -> None: ...

    def start_canary(self, agent_id: str, *, version: str, steps: list[int], step_ms: int, min_success: float,
                     by: str) -> dict[str, Any]: ...

    def intents(self, since_ms: int | None) -> dict[str, Any]: ...

    def handoff(self, message_id: str, *, by: str, answer: str | None = None,
                capability: str | None = None) -> dict[str, Any]: ...

    def audit(self, *, agent: str | None, since: str | None, until: str | None,
              kinds: list[str]) -> list[dict[str, Any]]: ...

    def map_intent(self, phrase: str, capability: str, *, confidence: float, by: str) -> dict[str, Any]: ...

    def unmap_intent(self, phrase: str, *, by: str) -> dict[str, Any]: ...

    def policies(self) -> list[dict[str, Any]]: ...

    def apps(self) -> list[dict[str, Any]]: ...

    def set_app_quota(self, app_id: str, *, rate: float | None, burst: int | None, by: str) -> dict[str, Any]: ...

    def create_app(self, *, name: str, tenant: str, capabilities: list[str], rate: float, burst: int | None,
                   by: str) -> dict[str, Any]: ...

    def rotate_app(self, app_id: str, *, by: str) -> dict[str, str]: ...

    def revoke_app(self, app_id: str, *, key_id: str | None, by: str) -> dict[str, Any]: ...

    def operators(self) -> list[dict[str, Any]]: ...

    def create_operator(self, *, name: str, role: str, redrive_rate: float, by: str) -> dict[str, str]: ...

    def revoke_operator(self, operator_id: str, *, by: str) -> dict[str, Any]: ...

    def policy_preview(self, scope: str, changes: Mapping[str, Any]) -> dict[str, Any]: ...

    def set_policy(self, scope: str, changes: Mapping[str, Any], by: str) -> dict[str, Any]: ...


def _scope(scope: str) -> str:
    return "*" if scope in ("", "*") else check_capability(scope)


class ConsoleBackend:
    """Backend over the namespace's topics, with the use cases of reach.ops wherever the CLI does the same thing."""

    def __init__(self, *, names: Names, kafka: KafkaSettings, reach: ReachSettings, redis: RedisSettings,
                 status_url: str | None = None, box: SecretBox | None = None) -> None:
        self._box = box  # the gateway's secrets key: only making a key (an app's, an operator's token) needs it
        self._names = names
        self._kafka = kafka
        self._reach = reach
        self._redis = redis
        self._status_url = status_url  # the stream app's views (REACH_GATEWAY_STATUS_URL); None: the CLI's default

    def _receipts(self, since_ms: int | None, until_ms: int | None) -> list[dict[str, Any]]:
        reader = topicreader.open_reader("console-receipts", self._kafka)
        try:
            return list(analytics.read_receipts(reader, self._names.receipts, since_ms, until_ms,
                                                analytics.LoadStats(), timeout=5.0))
        finally:
            reader.close()

    def overview(self, since_ms: int, until_ms: int, bucket_ms: int) -> dict[str, Any]:
        rows = self._receipts(since_ms, until_ms)
        with analytics.temp_workdir() as tmp:
            con = analytics.load(iter(rows), Path(tmp))
            stats = overview.per_capability(con, until_ms - since_ms)
            series = overview.series(con, bucket_ms)
            used = overview.usage(con)
        return {"since_ms": since_ms, "until_ms": until_ms, "bucket_ms": bucket_ms, "receipts": len(rows),
                "capabilities": [s.as_dict() for s in stats], "series": series, "backlog": self.backlog(),
                "usage": [u.as_dict() for u in used]}

    def backlog(self) -> list[dict[str, Any]]:
        """Consumer lag now of the router's group and every registered agent's inbox group, by topic."""
        agents = {i.registration.agent_id for i in read_registry(self._kafka, self._names, timeout=5.0)
                  .instances(now_ms())}
        groups = [self._names.router_app_id, *sorted(self._names.agent_group(a) for a in agents)]
        reader = topicreader.open_reader("console-lag", self._kafka)
        try:
            # coordinator requests in the group-admin child: a librdkafka abort there must not take the gateway down
            lag = consumer_lag(groupadmin.shared(self._kafka), reader, groups, timeout=5.0)
        finally:
            reader.close()
        return [{"group": g, "topic": t, "lag": n} for (t, g), n in sorted(lag.items(), key=lambda kv: kv[0][::-1])]

    def agents(self, where: Where | None = None) -> list[dict[str, Any]]:
        """The page `where` asks for (every instance without it)."""
        listed = ops_agents.instances(self._kafka, self._names, timeout=5.0, where=where)
        running = {a: c for a, c in ops_canary.current(self._names, kafka=self._kafka).items()
                   if c.state is CanaryState.RUNNING}
        rows = []
        for info, row in listed:
            reg = info.registration
            canary = running.get(reg.agent_id)
            row["build_version"] = reg.build_version
            row["arm"] = None if canary is None else "canary" if reg.build_version == canary.version else "stable"
            rows.append(row)
        return rows

    def instance_action(self, instance_id: str, action: InstanceAction, by: str) -> None:
        control.publish(control.instance_record(instance_id, action, by=by), names=self._names, kafka=self._kafka)

    def receipts_of(self, message_id: str, since_ms: int, until_ms: int) -> list[dict[str, Any]]:
        """Every receipt of the message in the window, with its routing decision (the status row has none)."""
        reader = topicreader.open_reader("console-trace", self._kafka)
        found: list[dict[str, Any]] = []
        try:
            starts = topicreader.start_offsets(reader, self._names.receipts, since_ms, 5.0)
            for msg in topicreader.read_range(reader, self._names.receipts, starts, until_ms=until_ms,
                                              idle_timeout=5.0):
                if (msg.key() or b"") != message_id.encode():
                    continue
                try:
                    receipt = codec.decode(msg.value() or b"", Receipt)
                except DecodeError:
                    continue
                found.append(receipt.model_dump(mode="json", exclude={"payload", "result"}))
        finally:
            reader.close()
        return sorted(found, key=lambda r: (r["generation"], r["at"]))

    def letters(self, filters: dlq.Filters, error_code: str | None) -> list[dict[str, Any]]:
        items, _ = ops_dlq.letters(filters, names=self._names, kafka=self._kafka)
        return [{**ops_dlq.summary(item), **ops_dlq.contents(item)} for item in items
                if not error_code or (item.record.error is not None and item.record.error.code == error_code)]

    def redrive(self, filters: dlq.Filters, *, dry_run: bool, rate: float | None, by: str) -> dict[str, Any]:
        items, _ = ops_dlq.letters(filters, names=self._names, kafka=self._kafka)
        if not items:
            return {**dlq.Summary().as_dict(), "dry_run": dry_run}
        summary = ops_dlq.replay_letters(items, settings=self._reach, kafka=self._kafka, dry_run=dry_run, rate=rate,
                                         by=by, lookup=lambda mid: ops_dlq.status_row(mid, settings=self._reach,
                                                                               base=self._status_url))
        return {**summary.as_dict(), "dry_run": dry_run, "skipped_completed_ids": summary.skipped_completed,
                "skipped_in_progress_ids": summary.skipped_in_progress}

    def weights(self) -> dict[str, dict[str, Any]]:
        view = control.read_control(names=self._names, kafka=self._kafka)
        scopes = {r.scope: r for r in view.records().values() if r.kind is ControlKind.WEIGHTS and r.weights}
        rows = {scope: {"weights": dict(view.weights(scope)), "updated_by": r.updated_by, "updated_at": r.updated_at}
                for scope, r in scopes.items()}
        rows.setdefault("*", {"weights": dict(view.weights("*")), "updated_by": "default", "updated_at": None})
        return rows

    def preview(self, scope: str, changes: Mapping[str, float | None]) -> dict[str, Any]:
        scope = _scope(scope)
        new = ops_weights.changed(scope, changes, names=self._names, kafka=self._kafka)
        result = ops_weights.preview_change(scope, new, names=self._names, kafka=self._kafka)
        return {"scope": scope, "weights": dict(new), **result.as_dict()}

    def set_weights(self, scope: str, changes: Mapping[str, float | None], by: str) -> dict[str, float]:
        scope = _scope(scope)
        new = ops_weights.changed(scope, changes, names=self._names, kafka=self._kafka)
        ops_weights.publish(scope, new, by=by, names=self._names, kafka=self._kafka)
        return dict(new)

    def canaries(self) -> list[dict[str, Any]]:
        return ops_canary.rows(ops_canary.current(self._names, kafka=self._kafka))

    def finish_canary(self, agent_id: str, state: CanaryState, by: str) -> None:
        ops_canary.finish(agent_id, state, by=by, names=self._names, kafka=self._kafka)

    def start_canary(self, agent_id: str, *, version: str, steps: list[int], step_ms: int, min_success: float,
                     by: str) -> dict[str, Any]:
        """`reach canary start` for an agent that has registered instances (a typo is refused); its row."""
        registered = {i.registration.agent_id for i in read_registry(self._kafka, self._names, timeout=5.0)
                      .instances(now_ms())}
        if agent_id not in registered:
            raise ConfigError(f"agent {agent_id!r} has no registered instance: check the id on the Agents page "
                              f"(`reach canary start` may still prepare one before its instances start).")
        return ops_canary.row(ops_canary.start(agent_id, version=version, steps=steps, step_ms=step_ms,
                                               min_success=min_success, by=by, names=self._names, kafka=self._kafka))

    def intents(self, since_ms: int | None) -> dict[str, Any]:
        """The exact map, the stage shares since `since_ms` and the handoff queue: `reach intents ls`,
        `reach intents stats --since` and `reach handoff ls --json`, with the same use cases (reach.ops)."""
        return {"map": ops_intents.map_rows(self._names, self._kafka),
                "stats": ops_intents.read_stats(self._names, self._kafka, since_ms).as_dict(),
                "handoffs": [ops_handoff.summary(h) for h in ops_handoff.queue(self._desk())]}

    def handoff(self, message_id: str, *, by: str, answer: str | None = None,
                capability: str | None = None) -> dict[str, Any]:
        """Take a handoff (neither answer nor capability), or resolve it as `reach handoff take|resolve` does."""
        desk = self._desk()
        moved = (ops_handoff.take(desk, message_id, by=by) if answer is None and capability is None
                 else ops_handoff.resolve(desk, message_id, by=by, answer=answer, capability=capability))
        return ops_handoff.summary(moved)

    def audit(self, *, agent: str | None, since: str | None, until: str | None,
              kinds: list[str]) -> list[dict[str, Any]]:
        """`reach audit --json` with the same filters (ConfigError for a bad range or kind, before any read)."""
        return ops_audit.history(names=self._names, kafka=self._kafka, agent=agent, since=since, until=until,
                                 kinds=kinds)

    def apps(self) -> list[dict[str, Any]]:
        """`reach apps ls --json`: every app with its keys and quota, never a secret."""
        return [ops_apps.summary(a) for a in ops_apps.listing(self._apps(by="console"))]

    def set_app_quota(self, app_id: str, *, rate: float | None, burst: int | None, by: str) -> dict[str, Any]:
        """`reach apps quota`, as `console:<operator>`."""
        return ops_apps.summary(ops_apps.set_quota(self._apps(by=by), app_id, rate=rate, burst=burst))

    def create_app(self, *, name: str, tenant: str, capabilities: list[str], rate: float, burst: int | None,
                   by: str) -> dict[str, Any]:
        """`reach apps create --json` (the secret, shown once by the caller) for capabilities agents serve now (a
        typo is refused; the CLI may still name one before its first agent starts)."""
        unknown = sorted(set(capabilities) - self._registered())
        if unknown:
            raise ConfigError(f"capability {', '.join(map(repr, unknown))} is not registered by any agent: check "
                              "the names (the Agents page lists what is served), or leave the list empty for all")
        return ops_apps.create(self._apps(by=by), name=name, tenant=tenant, capabilities=capabilities, rate=rate,
                               burst=burst).as_dict()

    def rotate_app(self, app_id: str, *, by: str) -> dict[str, str]:
        """`reach apps rotate --json`: the new key's secret, shown once by the caller."""
        return ops_apps.secret(ops_apps.rotate(self._apps(by=by), app_id))

    def revoke_app(self, app_id: str, *, key_id: str | None, by: str) -> dict[str, Any]:
        return ops_apps.summary(ops_apps.revoke(self._apps(by=by), app_id, key_id=key_id))

    def operators(self) -> list[dict[str, Any]]:
        """`reach operators ls --json`: never a token."""
        return [ops_operators.summary(r) for r in ops_operators.listing(self._operators(by="console"))]

    def create_operator(self, *, name: str, role: str, redrive_rate: float, by: str) -> dict[str, str]:
        """`reach operators create`: the token, shown once by the caller and never stored in plaintext."""
        made = ops_operators.create(self._operators(by=by), name=name, role=role, redrive_rate=redrive_rate)
        return ops_operators.token(made, name=name, role=role)

    def revoke_operator(self, operator_id: str, *, by: str) -> dict[str, Any]:
        return ops_operators.summary(ops_operators.revoke(self._operators(by=by), operator_id))

    def _operators(self, *, by: str) -> ops_operators.OperatorStore:
        return ops_operators.OperatorStore(log=KafkaAppLog(names=self._names, kafka=self._kafka), box=self._box,
                                           by=by)

    def _apps(self, *, by: str) -> AppStore:
        return AppStore(log=KafkaAppLog(names=self._names, kafka=self._kafka), box=self._box, by=by)

    def policies(self) -> list[dict[str, Any]]:
        """`reach policy show --json`: the effective policy of `*` and of every capability with its own record."""
        return ops_policy.show(names=self._names, tiers=self._tiers(), kafka=self._kafka)

    def policy_preview(self, scope: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        self._known(scope)
        return ops_policy.preview(scope, changes, names=self._names, tiers=self._tiers(), kafka=self._kafka)

    def set_policy(self, scope: str, changes: Mapping[str, Any], by: str) -> dict[str, Any]:
        """`reach policy set`, as `console:<operator>`; the report of the scope after it."""
        self._known(scope)
        return ops_policy.publish(scope, changes, by=by, names=self._names, tiers=self._tiers(),
                                  kafka=self._kafka).report

    def _known(self, scope: str) -> None:
        """A console form names a capability an agent registers or one with a policy already: a typo is refused
        here (`reach policy set` may still prepare a capability before its first agent starts)."""
        if scope == "*":
            return
        if scope not in self._registered() and scope not in {r["scope"] for r in self.policies()}:
            raise ConfigError(f"capability {scope!r} is not registered by any agent and has no policy of its own: "
                              "check the name (the Agents page lists what is served), or prepare it with "
                              f"`reach policy set --capability {scope}`.")

    def _registered(self) -> set[str]:
        """The capabilities registered instances serve now."""
        return {c.name for i in read_registry(self._kafka, self._names, timeout=5.0).instances(now_ms())
                for c in i.registration.capabilities}

    def _tiers(self) -> list[str]:
        return topics.load(self._reach.topics_file).retry_tiers()

    def map_intent(self, phrase: str, capability: str, *, confidence: float, by: str) -> dict[str, Any]:
        """`reach intents set` for a capability agents serve now (a typo is refused): the mapping before and after."""
        if capability not in self._registered():
            raise ConfigError(f"capability {capability!r} is not registered by any agent: map the intent to one the "
                              "Agents page lists (`reach intents set` may still name one before it starts)")
        before = self._mapped(phrase)
        record = ops_intents.set_mapping(phrase, capability, confidence=confidence, names=self._names,
                                         kafka=self._kafka, by=by)
        assert record.intent is not None
        return {"phrase": record.intent.phrase, "before": before, "after": record.intent.capability}

    def unmap_intent(self, phrase: str, *, by: str) -> dict[str, Any]:
        """`reach intents rm` of a mapping the control topic holds (a seed has nothing to remove)."""
        before = self._mapped(phrase)
        if before is None:
            raise ConfigError(f"no operator or handoff mapping for {phrase!r}: nothing to remove (the Intents page "
                              "lists the map; a seed follows the registrations)")
        ops_intents.remove_mapping(phrase, names=self._names, kafka=self._kafka, by=by)
        return {"phrase": phrase, "before": before, "after": None}

    def _mapped(self, phrase: str) -> str | None:
        """The capability the control topic maps `phrase` to (normalised as the records are), if any."""
        key = mappings.normalize(phrase)
        return next((str(r["capability"]) for r in ops_intents.map_rows(self._names, self._kafka, seeds=False)
                     if r["phrase"] == key), None)

    def _desk(self) -> HandoffDesk:
        return ops_handoff.desk(self._names, self._kafka, self._redis)
