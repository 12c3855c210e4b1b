"""What the import-rule tests share (tests/unit/core/test_core_imports.py, tests/unit/test_boundaries.py): every
import statement of a file, also one inside a function, as the absolute module names it names."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported(path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The absolute module names an import statement names, relative ones resolved against `path`'s package
    (`from reach import codec` names reach.codec: the name after `import` may be a module of its own)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = list(path.relative_to(ROOT).with_suffix("").parts)[:-1]  # __init__: the package itself
        base = ".".join([*package[: len(package) - (node.level - 1)], *([node.module] if node.module else [])])
    if base == "reach" or base.startswith("reach."):
        return [f"{base}.{alias.name}" for alias in node.names]
    return [base]


def offending(files: Iterable[Path], bad: Callable[[str], bool]) -> list[str]:
    """file:line: import (module) for every import in `files` of a module `bad` refuses."""
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for module in imported(path, node):
                    if bad(module):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)} ({module})")
    return found
