"""The documentation builds and the README stays a page for users.

``mkdocs build --strict`` turns every warning into a failure: a link to a page or an anchor
that does not exist, a page missing from the navigation, a CLI reference that mkdocs-click
cannot generate from ``qcllp.cli:main``. It runs as a real subprocess in the repository root,
as a person or CI would run it. The README must keep CI's test command verbatim (``.ci/run``
runs it) and its links must resolve, since GitHub shows it as the project's front page.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TEST_COMMAND = (
    "bash deploy/bootstrap.sh --test && .venv/bin/python -m pytest"
    " && .venv/bin/python -m pytest -m slow"
)
DEMO_COMMAND = "bash deploy/bootstrap.sh && .venv/bin/qcllp demo"
MAX_README_LINES = 150


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocs_click") is None,
    reason="mkdocs or mkdocs-click is not installed (pip install -e '.[docs]')",
)
def test_docs_build_strict(tmp_path: Path) -> None:
    """``mkdocs build --strict`` exits 0: no broken link, anchor or page, the CLI page renders."""
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    cli_page = (site / "cli" / "index.html").read_text(encoding="utf-8")
    assert "qcllp serve scorer" in cli_page


def test_readme_is_short_and_keeps_the_two_commands() -> None:
    """The README has at most 150 lines and both fresh-machine commands verbatim."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_README_LINES
    assert TEST_COMMAND in text.splitlines()
    assert DEMO_COMMAND in text.splitlines()


def test_readme_links_resolve() -> None:
    """Every relative link of the README names a file of the repository."""
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t)]
    assert relative, "the README links to the documentation"
    missing = [t for t in relative if t and not (ROOT / t).exists()]
    assert missing == []
