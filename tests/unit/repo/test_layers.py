"""The code's imports read as the layer rules read them (every ``import`` and ``from …
import`` of a module, function-level ones included; the rules themselves are import-linter
contracts in pyproject.toml, checked by ``make lint``), and the tooling apart from the
product's package."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "src"
TOOLS_SRC = ROOT / "tools" / "src"


def module_name(path: Path, root: Path = SRC) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(name: str, path: Path) -> set[str]:
    """Every module module ``name`` (at ``path``) imports, and each name it imports from one
    (``from a import b``: ``a`` and ``a.b``, which may be a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found |= {base, *(f"{base}.{alias.name}" for alias in node.names)}
    return found


def product_modules() -> dict[str, Path]:
    return {module_name(path): path for path in (SRC / "headway").rglob("*.py")}


def test_the_tooling_is_not_in_the_product_package() -> None:
    tooling = {module_name(p, TOOLS_SRC) for p in (TOOLS_SRC / "headway_tools").rglob("*.py")}
    assert {"headway_tools.bench.checker", "headway_tools.testing.nats_server"} <= tooling
    # What the old layout shipped is gone from the product's package.
    assert not set(product_modules()) & {"headway.bench", "headway.loadgen", "headway.testing"}


def test_the_check_reads_function_level_imports() -> None:
    headway = SRC / "headway"
    # `headway run gateway` imports the gateway inside the command's function.
    serve = imports_of("headway.cli.serve", headway / "cli" / "serve.py")
    assert "headway.app.process.build_gateway" in serve
    http1 = imports_of("headway.transport.http1", headway / "transport" / "http1.py")
    assert "headway.transport.connection" in http1
    bench = TOOLS_SRC / "headway_tools" / "cli" / "bench.py"
    assert "headway_tools.bench.host.Machine" in imports_of("headway_tools.cli.bench", bench)
    assert len(product_modules()) > 300


def test_the_command_line_runs_without_the_tooling() -> None:
    """As ``make up`` and the image install it: no ``headway.commands`` entry point, and
    any import of ``headway_tools`` fails. The product's commands are all there."""
    script = (
        "import importlib.metadata, sys\n"
        "importlib.metadata.entry_points = lambda group: []\n"
        "sys.modules['headway_tools'] = None\n"
        "from typer.testing import CliRunner\n"
        "from headway.cli import app\n"
        "print(CliRunner().invoke(app, ['--help']).output)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    for command in ("up", "run", "models", "billing", "batches", "db", "keys"):
        assert f" {command} " in done.stdout, command
    assert " bench " not in done.stdout and " loadgen " not in done.stdout
