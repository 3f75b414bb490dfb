"""The house's rules, checked on the code: arrows point down, no package is a drawer, no
function is longer than a screen and no module longer than 500 lines.

The direction of imports is declared once, in ``pyproject.toml`` (``[tool.importlinter]``),
and checked by import-linter (a maintained tool that builds the import graph, lazy imports
included), run as the command a developer runs.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "qcllp"
MAX_MODULES_PER_PACKAGE = 15
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500


def _modules():
    """Every module of the package, its tests, benchmarks and deploy scripts but the database
    migrations (each one revision, written once and never edited: their length is the
    schema's, not a drawer's)."""
    folders = [PACKAGE, *(ROOT / name for name in ("tests", "benchmarks", "deploy"))]
    return [
        path
        for folder in folders
        for path in folder.rglob("*.py")
        if "migrations" not in path.parts
    ]


def test_imports_point_down_the_layers_and_learn_stays_free_of_io():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


def test_no_package_holds_more_than_fifteen_modules():
    crowded = {
        str(folder.relative_to(ROOT)): n
        for folder in [PACKAGE, *PACKAGE.rglob("*")]
        if folder.is_dir()
        and (folder / "__init__.py").exists()
        and "migrations" not in folder.parts
        and (n := len([p for p in folder.glob("*.py") if p.name != "__init__.py"]))
        > MAX_MODULES_PER_PACKAGE
    }
    assert crowded == {}


def test_no_function_is_over_sixty_lines_and_no_module_over_five_hundred():
    long_functions, long_modules = {}, {}
    for path in _modules():
        source = path.read_text()
        name = str(path.relative_to(ROOT))
        if source.count("\n") > MAX_MODULE_LINES:
            long_modules[name] = source.count("\n")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long_functions[f"{name}:{node.lineno} {node.name}"] = lines
    assert long_modules == {}
    assert long_functions == {}
