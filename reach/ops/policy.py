"""Retry, timeout, budget and idempotency policy per capability on the control topic: the effective policy of a
scope (each field's value, where it comes from, who applies it, with the consistency warnings) and publishing a
change to a scope's own POLICY record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reach import control, policyfields, registry
from reach.core import fallback
from reach.core.timeouts import check_timeout_ms
from reach.core.views.controlview import ControlView
from reach.envelopes import now_ms
from reach.errors import ConfigError
from reach.kafka import topicreader
from reach.names import Names, check_capability
from reach.records import Control, ControlKind, Policy
from reach.settings import KafkaSettings

CLEAR = "none"
"""`reach policy set --fallback none` clears the scope's fallback."""


@dataclass(frozen=True, slots=True)
class Published:
    """A scope's POLICY record just published, the fields it changed, and the scope's effective policy now."""

    record: Control
    changes: dict[str, Any]
    report: dict[str, Any]


def scope_of(capability: str | None) -> str:
    """The scope a capability names (InvalidName when it is not one); none: every capability (`*`)."""
    return check_capability(capability) if capability else "*"


def report(view: ControlView, scope: str, tiers: list[str]) -> dict[str, Any]:
    """The effective policy of a scope: per field the value, where it comes from, who applies it; and the
    consistency warnings of tiers, backoff and budget."""
    policy = view.policy(scope)
    rows = policyfields.effective(policy, view.policy_sources(scope))
    return {"scope": scope,
            "fields": {spec.name: {"value": value, "shown": policyfields.show(spec, value), "from": source,
                                   "applies": spec.applies} for spec, value, source in rows},
            "warnings": policyfields.check(policy, tiers)}


def show(*, names: Names, tiers: list[str], capability: str | None = None,
         kafka: KafkaSettings) -> list[dict[str, Any]]:
    """The reports of `*` and of every capability with its own POLICY record, or of `capability` only."""
    view = control.read_control(names=names, kafka=kafka)
    if capability:
        scopes = [check_capability(capability)]
    else:
        scopes = ["*", *sorted(r.scope for r in view.records().values()
                               if r.kind is ControlKind.POLICY and r.scope != "*")]
    return [report(view, scope, tiers) for scope in scopes]


def changes(given: Mapping[str, object]) -> dict[str, Any]:
    """The fields given (None: keep the current value) as Policy values, in the order given; a duration may be
    text like `2m` (ConfigError names the field's `reach policy set` option). ConfigError for an unknown field."""
    out: dict[str, Any] = {}
    for name, value in given.items():
        spec = policyfields.BY_NAME.get(name)
        if spec is None:
            raise ConfigError(f"{name!r} is not a policy field: expected one of {', '.join(policyfields.BY_NAME)}.")
        if value is None:
            continue
        out[name] = (policyfields.parse_duration(value, option=spec.option)
                     if spec.unit == "duration" and isinstance(value, str) else value)
        if name == "dead_after_ms" and out[name] < 1_000:
            raise ConfigError(f"{spec.option} must be at least 1s (a letter nobody redrove that long is DEAD).")
        if name == "execution_timeout_ms":  # a cap: 1 ms to 1 h (BadTimeout, a ConfigError: exit 2)
            check_timeout_ms(out[name], what=spec.option)
        if spec.unit == "capability":  # a capability name (InvalidName: exit 2), or `none` to clear it
            out[name] = None if str(value).strip().lower() == CLEAR else check_capability(str(value).strip())
    return out


_TRUE, _FALSE = frozenset({"true", "yes", "on", "1"}), frozenset({"false", "no", "off", "0"})


def from_text(given: Mapping[str, str]) -> dict[str, Any]:
    """Policy fields typed as text (a console form, a JSON body): blank keeps the value; a count a whole number, a
    flag true/false, a duration like `2m` (checked by `changes`). ConfigError names the field and what it takes;
    keys that are not policy fields are left out (the form carries others)."""
    out: dict[str, Any] = {}
    for spec in policyfields.FIELDS:
        text = given.get(spec.name, "").strip()
        if not text:
            continue
        if spec.unit == "count":
            if not text.isdigit():
                raise ConfigError(f"{spec.name} {text!r} is not a whole number (e.g. 3).")
            out[spec.name] = int(text)
        elif spec.unit == "flag":
            if text.lower() not in _TRUE | _FALSE:
                raise ConfigError(f"{spec.name} {text!r} is not true or false.")
            out[spec.name] = text.lower() in _TRUE
        else:
            out[spec.name] = text
    return changes(out)


def _merged(view: ControlView, scope: str, changed: Mapping[str, Any], *, by: str) -> Control:
    """The scope's POLICY record with `changed` merged into its own fields (pydantic's ValidationError when a value
    does not fit its field)."""
    found = view.records().get(control.key_of(ControlKind.POLICY, scope))
    own = found.policy.model_dump() if found is not None and found.policy is not None else {}
    return control.policy_record(Policy(**{**own, **changed}), scope=scope, by=by)


def preview(scope: str, changed: Mapping[str, Any], *, names: Names, tiers: list[str],
            kafka: KafkaSettings) -> dict[str, Any]:
    """What publishing `changed` would do, without publishing: per field whose effective value moves, before and
    after (as operators write them), and the consistency warnings of the policy after."""
    if not changed:
        raise ConfigError("give at least one field to change, e.g. max_attempts 3 or budget 2m")
    view = control.read_control(names=names, kafka=kafka)
    before = report(view, scope, tiers)
    record = _merged(view, scope, changed, by="preview")
    view.apply(record.key, record)
    after = report(view, scope, tiers)
    diff = [{"field": name, "before": row["shown"], "before_from": row["from"],
             "after": after["fields"][name]["shown"]}
            for name, row in before["fields"].items() if row["shown"] != after["fields"][name]["shown"]]
    return {"scope": scope, "changes": dict(changed), "diff": diff, "warnings": after["warnings"],
            "warnings_before": before["warnings"]}


def known_capabilities(*, names: Names, kafka: KafkaSettings) -> set[str]:
    """Capabilities an agent registers (in any state) or that have a topic: what a fallback may name."""
    known = {c.name for info in registry.read_registry(kafka, names).instances(now_ms())
             for c in info.registration.capabilities}
    reader = topicreader.open_reader("policy", kafka)
    try:
        topics = reader.list_topics(timeout=10).topics
    finally:
        reader.close()
    prefix = names.capability_prefix
    return known | {t[len(prefix):] for t in topics if t.startswith(prefix)}


def check_fallback(scope: str, capability: str, *, view: ControlView, known: set[str]) -> None:
    """ConfigError (exit 2) unless `scope -> capability` is a fallback that can serve: one capability's, naming a
    capability Reach knows, and ending within reach.core.fallback.MAX_DEPTH hops without coming back."""
    if scope == "*":
        raise ConfigError("a fallback is set per capability: give --capability C (every capability falling back to "
                          "one would loop at that one).")
    if capability not in known:
        raise ConfigError(f"fallback {capability!r} is not a capability any agent registers and has no topic: "
                          "start an agent that serves it first, or check the name (`reach agents`).")
    problem = fallback.chain_problem(scope, capability, lambda c: view.policy(c).fallback if c != scope else None)
    if problem is not None:
        raise ConfigError(f"fallback {scope} -> {capability} refused: {problem}; clear one of them with "
                          f"`reach policy set --capability <c> --fallback {CLEAR}`.")


def publish(scope: str, changed: Mapping[str, Any], *, by: str, names: Names, tiers: list[str],
            kafka: KafkaSettings) -> Published:
    """Publish the scope's POLICY record with `changed` merged into its own fields (omitted fields keep the scope's
    current value); SDKs, clients and routers follow the control topic and apply it without a restart. ConfigError
    when nothing changes or a fallback cannot serve (check_fallback), pydantic's ValidationError when a value does
    not fit its field."""
    if not changed:
        raise ConfigError("give at least one field to set, e.g. --max-attempts 3 or --budget 2m")
    view = control.read_control(names=names, kafka=kafka)
    if changed.get("fallback") is not None:
        check_fallback(scope, changed["fallback"], view=view, known=known_capabilities(names=names, kafka=kafka))
    record = _merged(view, scope, changed, by=by)
    control.publish(record, names=names, kafka=kafka)
    view.apply(record.key, record)
    return Published(record=record, changes=dict(changed), report=report(view, scope, tiers))
