#!/usr/bin/env python3
"""The layout figures of a tree: src/headway's lines and files, the tooling still in it,
gateway/, the docstring share (modules, classes, functions) and the widest ``__init__``.

    .venv/bin/python scripts/layout-figures.py [TREE]   (default: this checkout)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

TOOLING = ("bench", "loadgen", "testing")
"""The folders the tooling had inside the product before it left (with cli/bench.py, loadgen.py)."""


def lines(paths: list[Path]) -> int:
    return sum(len(path.read_text().splitlines()) for path in paths)


def main(tree: Path) -> None:
    root = tree / "src" / "headway"
    modules = sorted(root.rglob("*.py"))
    tooling = [
        path
        for path in modules
        if path.relative_to(root).parts[0] in TOOLING
        or path.relative_to(root).as_posix() in ("cli/bench.py", "cli/loadgen.py")
    ]
    gateway = [path for path in modules if path.relative_to(root).parts[0] == "gateway"]
    docstrings, product_docstrings, widest = 0, 0, (0, "")
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                text = ast.get_docstring(node, clean=False)
                count = text.count("\n") + 1 if text else 0
                docstrings += count
                product_docstrings += 0 if path in tooling else count
            if isinstance(node, ast.ClassDef):
                for member in node.body:
                    if isinstance(member, ast.FunctionDef) and member.name == "__init__":
                        count = len(member.args.args) - 1 + len(member.args.kwonlyargs)
                        if count > widest[0]:
                            widest = (count, f"{path.relative_to(root)}:{node.name}")
    total = lines(modules)
    print(f"src/headway: {total:,} lines in {len(modules)} files")
    print(f"tooling in it: {lines(tooling):,} lines")
    print(f"gateway/: {lines(gateway):,} lines in {len(gateway)} files")
    print(f"docstrings: {docstrings:,} lines, {docstrings / total:.1%}")
    product = total - lines(tooling)
    share = product_docstrings / product
    print(f"docstrings of the product alone: {product_docstrings:,} lines, {share:.1%}")
    print(f"widest __init__: {widest[0]} parameters ({widest[1]})")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
