"""The house's rules, checked on the code: arrows point down, and no package is a drawer.

The direction of imports is declared once, in ``pyproject.toml`` (``[tool.importlinter]``),
and checked by import-linter (a maintained tool that builds the import graph, lazy imports
included), run as the command a developer runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "qcllp"
MAX_MODULES_PER_PACKAGE = 15


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
