"""MkDocs hooks (mkdocs.yml ``hooks:``).

docs/format.md tags its facts with evidence labels in brackets, ``[E]``, ``[S4]``, ``[S5, S7]``:
plain text on GitHub, but mkdocs-autorefs reads them as cross-references and (with ``--strict``)
fails the build. This escapes those labels in the page's Markdown before rendering, so the file
stays as written and reads the same in both places.
"""

from __future__ import annotations

import re
from typing import Any

_TAG = re.compile(r"\[((?:E|S\d+)(?:,\s*(?:E|S\d+))*)\](?![(:])")


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != "format.md":
        return markdown
    return _TAG.sub(r"\\[\1\\]", markdown)
