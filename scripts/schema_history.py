#!/usr/bin/env python3
"""Snapshot every Avro schema a record ever had on a branch's history into tests/unit/schemas_history/.

Walks `git log` of schemas/avro/ (the current .avsc files and the released history/<Name>/<n>.avsc, whose
content a commit may also have edited in place), and writes each distinct schema of each record once, in the
order first seen: `tests/unit/schemas_history/<Name>/<nn>-<commit>.avsc`. Two versions that differ only in
`doc` strings are one (docs do not take part in schema resolution). tests/unit/test_schema_evolution.py reads
these snapshots, so the check is hermetic (no git at test time, no history needed in a shallow clone).

Run it again after a schema release lands on main (it keeps the snapshots it finds and adds the new ones):
    python3 scripts/schema_history.py [--rev main]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "unit" / "schemas_history"


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout


def without_docs(node: Any) -> Any:
    """The schema as resolution sees it: `doc` strings dropped, everything else kept (defaults matter)."""
    if isinstance(node, dict):
        return {k: without_docs(v) for k, v in node.items() if k != "doc"}
    if isinstance(node, list):
        return [without_docs(v) for v in node]
    return node


def identity(schema: dict[str, Any]) -> str:
    return json.dumps(without_docs(schema), sort_keys=True)


def record_name(path: str) -> str:
    """schemas/avro/Receipt.avsc and schemas/avro/history/Receipt/6.avsc are both Receipt."""
    parts = Path(path).parts
    return parts[-2] if "history" in parts else Path(path).stem


def collect(rev: str) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Per record, its distinct schemas in the order first seen (oldest commit first), with that commit."""
    found: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    seen: set[tuple[str, str]] = set()
    for commit in _git("rev-list", "--reverse", rev, "--", "schemas/avro").split():
        paths = [p for p in _git("ls-tree", "-r", "--name-only", commit, "schemas/avro").split() if p.endswith(".avsc")]
        for path in sorted(paths):
            try:
                schema = json.loads(_git("show", f"{commit}:{path}"))
            except json.JSONDecodeError:
                continue  # a broken file in one commit: not a schema anyone could have run
            name = record_name(path)
            key = (name, identity(schema))
            if key not in seen:
                seen.add(key)
                found.setdefault(name, []).append((commit[:10], schema))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", default="HEAD", help="the history to walk (default HEAD)")
    args = parser.parse_args()
    added = 0
    for name, versions in sorted(collect(args.rev).items()):
        folder = OUT / name
        folder.mkdir(parents=True, exist_ok=True)
        kept = {identity(json.loads(p.read_text())) for p in folder.glob("*.avsc")}
        number = len(list(folder.glob("*.avsc")))
        for commit, schema in versions:
            if identity(schema) in kept:
                continue
            kept.add(identity(schema))
            (folder / f"{number:02d}-{commit}.avsc").write_text(json.dumps(schema, indent=2) + "\n")
            number += 1
            added += 1
    print(f"{added} new snapshot(s) under {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
