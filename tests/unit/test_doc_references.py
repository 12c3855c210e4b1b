"""Every Markdown file the code, tests and docs name is in the repository: nothing cites a file outside it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_MD = re.compile(r"[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md\b")


def _sources() -> list[Path]:
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    return files + [p for d in ("reach", "tests") for p in (ROOT / d).rglob("*.py")]


def _exists(name: str, where: Path) -> bool:
    # A name is relative to the repository root, to the naming file's folder, or a docs/ page by itself.
    return any((base / name).resolve().is_file() for base in (ROOT, where.parent, ROOT / "docs"))


def test_every_named_markdown_file_exists_in_the_repository() -> None:
    missing = [
        f"{path.relative_to(ROOT)}:{n}: {name}"
        for path in _sources()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for name in _MD.findall(line)
        if not _exists(name, path)
    ]
    assert not missing, "these name Markdown files the repository does not have:\n" + "\n".join(missing)
