"""MkDocs hooks (mkdocs.yml ``hooks:``).

docs/format.md tags its facts with evidence labels in brackets, ``[E]``, ``[S4]``, ``[S5, S7]``:
plain text on GitHub, but mkdocs-autorefs reads them as cross-references and (with ``--strict``)
fails the build. This escapes those labels in the page's Markdown before rendering, so the file
stays as written and reads the same in both places.

A Markdown table that does not render (rows cut off from their header by a paragraph, a missing
blank line before it, a delimiter row with the wrong number of cells) comes out as a paragraph of
``| a | b |`` text, and Markdown raises no error for it. ``on_page_content`` looks for such
paragraphs in every rendered page and logs a warning for each, which ``--strict`` (scripts/
build_docs.sh) turns into a failed build.
"""

from __future__ import annotations

import html
import logging
import re
from typing import Any

_TAG = re.compile(r"\[((?:E|S\d+)(?:,\s*(?:E|S\d+))*)\](?![(:])")
# a paragraph (outside code blocks: their text is in <pre>/<code>, never in a <p>) ...
_PARAGRAPH = re.compile(r"<p>(.*?)</p>", re.S)
# ... holding a line that reads as a table row: starts and ends with a pipe, with a cell between
_ROW = re.compile(r"^\s*\|.*\|.*\|\s*$", re.M)
_MARKUP = re.compile(r"<[^>]+>")

log = logging.getLogger("mkdocs.plugins.ortckpt")


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != "format.md":
        return markdown
    return _TAG.sub(r"\\[\1\\]", markdown)


def broken_table_rows(page_html: str) -> list[str]:
    """The lines of ``page_html``'s paragraphs that are Markdown table rows left unrendered."""
    rows = []
    for paragraph in _PARAGRAPH.findall(page_html):
        text = html.unescape(_MARKUP.sub("", paragraph))
        rows += [m.group(0).strip() for m in _ROW.finditer(text)]
    return rows


def on_page_content(page_html: str, page: Any, **_: Any) -> str:
    for row in broken_table_rows(page_html):
        log.warning(
            "%s: a Markdown table did not render; this row came out as text: %s", page.file.src_uri, row[:120]
        )
    return page_html
