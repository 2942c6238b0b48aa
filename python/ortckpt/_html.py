"""``CheckpointState._repr_html_``: a compact HTML summary for notebooks (Jupyter, VS Code).

One table of parameters (name, trainable or frozen, dtype, shape, size), then the optimizer groups
and the properties. Long checkpoints show their first ``MAX_ROWS`` parameters and a count of the
rest. Every name and value is HTML-escaped; nothing reads tensor values.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from . import _dtypes

if TYPE_CHECKING:
    from ._state_view import StateView

#: Parameters shown before "... and N more".
MAX_ROWS = 40


def _size(nbytes: int) -> str:
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{nbytes} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def _row(cells: list[str], tag: str = "td") -> str:
    return "<tr>" + "".join(f"<{tag}>{cell}</{tag}>" for cell in cells) + "</tr>"


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
        head += f" <small>from <code>{escape(state.source)}</code></small>"
    rows = [_row(["name", "", "dtype", "shape", "size"], "th")]
    for p in params[:MAX_ROWS]:
        shape = "nominal" if p.is_nominal else escape(str(list(p.shape)))
        kind = "trainable" if p.trainable else "frozen"
        rows.append(
            _row(
                [
                    f"<code>{escape(p.name)}</code>",
                    kind,
                    _dtypes.type_name(p.data_type),
                    shape,
                    _size(p.nbytes),
                ]
            )
        )
    if len(params) > MAX_ROWS:
        rows.append(f'<tr><td colspan="5">... and {len(params) - MAX_ROWS} more</td></tr>')
    parts = [f"<div>{head}", f'<table class="ortckpt">{"".join(rows)}</table>']
    if state.optimizer is not None:
        groups = "; ".join(
            f"<code>{escape(name)}</code>: step {g.step}, initial learning rate "
            f"{g.initial_learning_rate:g}, {len(g.states)} parameter states"
            for name, g in state.optimizer.items()
        )
        parts.append(f"<p>optimizer: {groups or 'no groups'}</p>")
    if state.properties:
        props = "".join(
            _row([f"<code>{escape(k)}</code>", escape(repr(v)), type(v).__name__])
            for k, v in state.properties.items()
        )
        parts.append(f"<table>{_row(['property', 'value', 'type'], 'th')}{props}</table>")
    parts.append("</div>")
    return "".join(parts)
