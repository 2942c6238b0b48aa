"""``CheckpointState._repr_html_``: a compact HTML summary for notebooks (Jupyter, VS Code).

One table of parameters (name, trainable or frozen, dtype, shape, size), then the optimizer groups
and the properties. Every section is capped, whatever the checkpoint holds (an untrusted one may
hold 100,000 properties or a megabyte-long name): the first ``MAX_ROWS`` parameters, groups and
properties, then "… N more"; names and values cut at ``MAX_TEXT`` characters. Every name and value
is HTML-escaped; nothing reads tensor values.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from . import _dtypes

if TYPE_CHECKING:
    from ._state_view import StateView

#: Rows of each section (parameters, optimizer groups, properties) shown before "… N more".
MAX_ROWS = 40
#: Characters of a name or a value shown before "… (N more characters)".
MAX_TEXT = 200


def _size(nbytes: int) -> str:
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{nbytes} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def _row(cells: list[str], tag: str = "td") -> str:
    return "<tr>" + "".join(f"<{tag}>{cell}</{tag}>" for cell in cells) + "</tr>"


def _text(value: str) -> str:
    """``value`` escaped, cut at ``MAX_TEXT`` characters."""
    if len(value) <= MAX_TEXT:
        return escape(value)
    return f"{escape(value[:MAX_TEXT])}… ({len(value) - MAX_TEXT} more characters)"


def _more(shown: int, total: int, columns: int) -> list[str]:
    """The "… N more" row of a section that holds more than it shows."""
    if total <= shown:
        return []
    return [f'<tr><td colspan="{columns}">… {total - shown} more</td></tr>']


def state_html(state: StateView) -> str:
    """The HTML ``CheckpointState._repr_html_`` returns."""
    params = list(state.parameters.values())
    trainable = sum(1 for p in params if p.trainable)
    flags = [f"version {state.version}"]
    if state.is_nominal:
        flags.append("nominal")
    if state.has_external_data:
        flags.append("external data")
    total = sum(p.nbytes for p in params)
    head = (
        f"<b>CheckpointState</b> ({escape(', '.join(flags))}): {trainable} trainable + "
        f"{len(params) - trainable} frozen parameters, {_size(total)}"
    )
    if state.source is not None:
        head += f" <small>from <code>{_text(state.source)}</code></small>"
    rows = [_row(["name", "", "dtype", "shape", "size"], "th")]
    for p in params[:MAX_ROWS]:
        shape = "nominal" if p.is_nominal else _text(str(list(p.shape)))
        kind = "trainable" if p.trainable else "frozen"
        rows.append(
            _row(
                [
                    f"<code>{_text(p.name)}</code>",
                    kind,
                    _dtypes.type_name(p.data_type),
                    shape,
                    _size(p.nbytes),
                ]
            )
        )
    rows += _more(MAX_ROWS, len(params), 5)
    parts = [f"<div>{head}", f'<table class="ortckpt">{"".join(rows)}</table>']
    if state.optimizer is not None:
        groups = list(state.optimizer.items())
        described = [
            f"<code>{_text(name)}</code>: step {g.step}, initial learning rate "
            f"{g.initial_learning_rate:g}, {len(g.states)} parameter states"
            for name, g in groups[:MAX_ROWS]
        ]
        if len(groups) > MAX_ROWS:
            described.append(f"… {len(groups) - MAX_ROWS} more")
        parts.append(f"<p>optimizer: {'; '.join(described) or 'no groups'}</p>")
    if state.properties:
        items = list(state.properties.items())
        props = [
            _row([f"<code>{_text(k)}</code>", _text(repr(v)), type(v).__name__]) for k, v in items[:MAX_ROWS]
        ]
        props += _more(MAX_ROWS, len(items), 3)
        parts.append(f"<table>{_row(['property', 'value', 'type'], 'th')}{''.join(props)}</table>")
    parts.append("</div>")
    return "".join(parts)
