"""A request's contract version and content key, pure (docs/decisions/0075).

`schema_version` on an envelope is the version of the capability contract the intake checked the request against
(`contract_version`): among the live versions in the request's range whose input schema accepts the payload, the
newest one's compatibility line (same major; for 0.x the same minor) and in it the oldest, so that every instance
at that version or later in the line serves it. The agent compares it with the version it serves (`mismatch`):
`^schema_version` must hold, else the request is REJECTED (SCHEMA_VERSION_MISMATCH) before its handler runs.
None means that no intake resolved a contract (a raw producer, an intent, no live version yet, a registry the
sender could not read): nothing to compare, the agent's own input schema is the only check.

`content_key` is the idempotency key of a request to an `idempotent` capability that names none: the same
capability, version, payload (canonical JSON), tenant, sender and session give the same key, so a second such
request reuses the first one's result instead of running again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence

from reach.core.routing import validation_error
from reach.core.versions import BadVersion, parse_version, satisfies
from reach.records import Capability

MAX_VERSION_CHARS = 64
CONTENT_KEY_PREFIX = "content:"  # never a caller's own key: theirs are scoped by their source (`gateway:<app>:`)



def contract_version(versions: Sequence[Capability], version_range: str, payload: Callable[[], bytes],
                     content_type: str = "application/json") -> str | None:
    """The contract version a request for `version_range` is checked against, from the live `versions` of its
    capability; None when none is in the range. `payload()` gives the body, read only when several versions are
    in the range (one version in range is the contract whatever the payload: its agent validates it)."""
    matching = [c for c in versions if satisfies(c.version, version_range)]
    if len(matching) <= 1:
        return matching[0].version if matching else None
    body = payload()
    accepting = [c for c in matching if validation_error(c.input_schema, body, content_type) is None]
    return pick(accepting or matching)


def pick(candidates: Sequence[Capability]) -> str:
    """Of the versions a request may be checked against (at least one), the contract it is stamped with: the newest
    one's compatibility line, its oldest version (every instance of the line from there on serves it)."""
    newest = max(candidates, key=lambda c: parse_version(c.version))
    line = [c for c in candidates if satisfies(newest.version, f"^{c.version}")]
    return min(line, key=lambda c: parse_version(c.version)).version


def mismatch(served: str, schema_version: str | None) -> str | None:
    """Why an instance serving version `served` may not run a request checked against `schema_version` (None: it
    may). A request with no schema_version is not compared."""
    if schema_version is None:
        return None
    try:
        if len(schema_version) > MAX_VERSION_CHARS:  # a version is short; parse_range remembers what it parses
            raise BadVersion(schema_version[:100])
        if satisfies(served, f"^{schema_version}"):
            return None
    except BadVersion:
        return (f"schema_version {schema_version[:100]!r} is not a version (major.minor.patch): it names the "
                "capability contract the request was checked against; leave it empty when none was")
    return (f"the request was checked against contract {schema_version}; this instance serves {served}, which "
            f"does not satisfy ^{schema_version} (an older version, or another major). Send it with a version range "
            f"that {served} satisfies, or run an instance of the {schema_version} line")


def canonical_json(payload: bytes, content_type: str) -> bytes:
    """The payload as canonical JSON (keys sorted, no spaces, UTF-8), so that two requests that differ only in key
    order or spacing hash the same; a payload that is not JSON is taken byte for byte."""
    if "json" not in content_type:
        return payload
    try:
        document = json.loads(payload)
    except (ValueError, RecursionError):
        return payload
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def content_key(*, capability: str, version: str, payload: bytes, content_type: str, tenant: str, source: str = "",
                session_key: str | None = None) -> str:
    """The idempotency key of a request that names none, to an idempotent capability: a SHA-256 of the capability,
    the contract version, the canonical payload, the tenant, the sender (`source`: a gateway app is `gateway:<app>`,
    so two apps' equal requests never share a result, as their own keys never do) and the session, if any (the same
    words in two conversations are two requests)."""
    digest = hashlib.sha256()
    for part in (capability.encode(), version.encode(), tenant.encode(), source.encode(),
                 (session_key or "").encode(), canonical_json(payload, content_type)):
        digest.update(len(part).to_bytes(8, "big"))  # length-prefixed: no two different tuples share the bytes
        digest.update(part)
    return CONTENT_KEY_PREFIX + digest.hexdigest()
