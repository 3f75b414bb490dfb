"""MkDocs hook: the key tables of docs/config.md, rendered from the plant config's models.

In docs/config.md, ``<!-- plant-config-keys SECTION -->`` becomes the table of that section's
keys (``plant``: the plant's own keys), with type, default and meaning from the pydantic
models of :mod:`qcllp.plant.config.document` (:func:`qcllp.plant.config.reference.
reference_table`), and ``<!-- plant-config-example -->`` the example plant file. So the
reference shows what the loader checks and cannot drift from it; a section of the schema
without its table fails the build (``mkdocs build --strict``, tests/test_docs.py).
"""

from __future__ import annotations

import re
from typing import Any

from mkdocs.exceptions import PluginError

PAGE = "config.md"
KEYS = re.compile(r"<!-- plant-config-keys (\w+) -->")
EXAMPLE = "<!-- plant-config-example -->"


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """docs/config.md with its markers rendered; every other page as it is."""
    if page.file.src_uri != PAGE:
        return markdown
    from qcllp.plant.config import example_config_path
    from qcllp.plant.config.reference import reference_table, sections

    missing = sorted(set(sections()) - set(KEYS.findall(markdown)))
    if missing:
        raise PluginError(f"docs/{PAGE} has no key table of {', '.join(missing)}")
    try:
        markdown = KEYS.sub(
            lambda m: reference_table(None if m.group(1) == "plant" else m.group(1)), markdown
        )
    except KeyError as exc:
        raise PluginError(f"docs/{PAGE}: {exc.args[0]}") from exc
    return markdown.replace(EXAMPLE, example_config_path().read_text(encoding="utf-8").strip())
