"""Semver ranges (npm style: `^1.2`, `~1.2.3`, `1.x`, `>=1.0 <2`, `a || b`) over python-semver versions."""

from __future__ import annotations

import re
from functools import lru_cache

from semver import Version

from reach.errors import ReachError


class BadVersion(ReachError):
    """A capability version or version range does not parse."""


_PART = re.compile(r"^(?P<op><=|>=|<|>|=|\^|~)?\s*v?(?P<ver>[0-9x*X]+(\.[0-9x*X]+){0,2}(-[0-9A-Za-z.-]+)?)$")

Comparator = tuple[str, Version]


def parse_version(text: str) -> Version:
    """A full semver version (`1.2.3`); capabilities declare exact versions."""
    try:
        return Version.parse(text)
    except (ValueError, TypeError):
        raise BadVersion(f"Version {text!r} is not semver: expected MAJOR.MINOR.PATCH, e.g. 1.0.0.") from None


def _expand(op: str, ver: str) -> list[Comparator]:
    nums = ver.split("-", 1)
    parts = nums[0].split(".")
    pre = nums[1] if len(nums) > 1 else None
    wild = next((i for i, p in enumerate(parts) if p in ("x", "X", "*")), len(parts))
    fixed = [int(p) for p in parts[:wild]]
    if len(fixed) < wild:
        raise BadVersion(f"bad version {ver!r}")
    known = len(fixed)
    full = fixed + [0] * (3 - known)
    low = Version(full[0], full[1], full[2], prerelease=pre)
    if known == 0:
        return [] if op in ("", "=", "^", "~", ">=", "<=") else [("<", Version(0, 0, 0))]
    if op in ("", "="):
        if known == 3:
            return [("=", low)]
        return [(">=", low), ("<", _bump(full, known - 1))]
    if op == "^":
        first_nonzero = next((i for i, n in enumerate(full[:known]) if n != 0), known - 1)
        return [(">=", low), ("<", _bump(full, min(first_nonzero, known - 1)))]
    if op == "~":
        return [(">=", low), ("<", _bump(full, 1 if known >= 2 else 0))]
    if op == ">" and known < 3:
        return [(">=", _bump(full, known - 1))]
    if op == "<=" and known < 3:
        return [("<", _bump(full, known - 1))]
    return [(op, low)]


def _bump(full: list[int], index: int) -> Version:
    bumped = full[: index + 1]
    bumped[index] += 1
    major, minor, patch = bumped + [0] * (3 - len(bumped))
    return Version(major, minor, patch)


@lru_cache(maxsize=4096)
def parse_range(text: str) -> tuple[tuple[Comparator, ...], ...]:
    """Parse a range into alternatives (OR) of comparator sets (AND); cached, ranges repeat a lot."""
    alternatives = []
    for alt in (text or "*").split("||"):
        comparators: list[Comparator] = []
        tokens = re.sub(r"(<=|>=|<|>|=|\^|~)\s+", r"\1", alt.replace(",", " ")).split()
        if len(tokens) == 3 and tokens[1] == "-":  # hyphen range `1.0 - 2.0`
            tokens = [">=" + tokens[0], "<=" + tokens[2]]
        for token in tokens or ["*"]:
            match = _PART.match(token)
            if not match:
                raise BadVersion(
                    f"Version range {text!r} does not parse at {token!r}: expected e.g. ^1.2, ~1.2.3, 1.x, "
                    ">=1.0 <2, or *."
                )
            comparators += _expand(match["op"] or "", match["ver"])
        alternatives.append(tuple(comparators))
    return tuple(alternatives)


@lru_cache(maxsize=4096)
def within_line(range_text: str, version: str | None) -> str:
    """`range_text` narrowed to the compatibility line of `version` (each alternative AND `^version`): the versions
    whose agents take a request stamped with that contract version (`schema_version`, decision 0075). A missing or
    unreadable `version` narrows nothing (the agent rejects what it cannot compare)."""
    if not version:
        return range_text
    try:
        parse_version(version)
    except BadVersion:
        return range_text
    alternatives = [alt.strip() for alt in (range_text or "*").split("||")]
    return " || ".join(f"^{version}" if alt in ("", "*") else f"{alt} ^{version}" for alt in alternatives)


def satisfies(version: Version | str, range_text: str) -> bool:
    """True when `version` lies in the range (pre-releases only match comparators that name one)."""
    ver = parse_version(version) if isinstance(version, str) else version
    for comparators in parse_range(range_text):
        if all(_holds(ver, op, bound) for op, bound in comparators):
            if ver.prerelease and not any(b.prerelease for _, b in comparators):
                continue
            return True
    return False


def _holds(ver: Version, op: str, bound: Version) -> bool:
    cmp = ver.compare(bound)
    return {"=": cmp == 0, ">": cmp > 0, ">=": cmp >= 0, "<": cmp < 0, "<=": cmp <= 0}[op]
