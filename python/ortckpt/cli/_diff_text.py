"""The text form of an ``ortckpt diff`` report."""

from __future__ import annotations

from typing import TextIO

from ._format import JsonValue, f32, yes_no
from ._style import Style

_LINE_COLORS = {"  -": "red", "  +": "green", "  ~": "yellow", "---": "bold", "+++": "bold"}


def _dims(shape: list[int] | None) -> str:
    return "nominal" if shape is None else str(shape)


def _number(value: JsonValue) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _values_text(values: dict[str, JsonValue]) -> str:
    text = f"{values['differing']} of {values['total']} values differ"
    if values["max_abs_diff"] is not None:
        text += f", max abs diff {_number(values['max_abs_diff'])}"
    return text


def _tensor_lines(label: str, entry: dict[str, JsonValue]) -> list[str]:
    lines = []
    if "trainable" in entry:
        kinds = ["trainable" if entry["trainable"][side] else "frozen" for side in ("a", "b")]
        lines.append(f"  ~ {label}: {kinds[0]} -> {kinds[1]}")
    if "nominal" in entry:
        lines.append(
            f"  ~ {label}: nominal {yes_no(entry['nominal']['a'])} -> {yes_no(entry['nominal']['b'])}"
        )
    for key in ("dtype", "shape"):
        if key in entry:
            lines.append(f"  ~ {label}: {key} {entry[key]['a']} -> {entry[key]['b']}")
    if "values" in entry:
        lines.append(f"  ~ {label}: {_values_text(entry['values'])}")
    return lines


def _property_text(entry: dict[str, JsonValue]) -> str:
    value = entry["value"]
    if entry["type"] == "float":
        shown = f32(float(value))
    else:
        shown = repr(value)
    return f"{shown} ({entry['type']})"


def print_diff(report: dict[str, JsonValue], out: TextIO, style: Style | None = None) -> None:
    """The text form of ``diff_states``: nothing when identical. Coloured when ``out`` is a
    terminal (see ``_style``) unless ``style`` says otherwise."""
    if report["identical"]:
        return
    lines = [f"--- {report['a']['path']}", f"+++ {report['b']['path']}"]
    if report["nominal"] is not None:
        nominal = report["nominal"]
        lines.append(f"nominal checkpoint: {yes_no(nominal['a'])} -> {yes_no(nominal['b'])}")

    params = report.get("parameters")
    if params and (params["only_in_a"] or params["only_in_b"] or params["changed"]):
        lines.append("parameters:")
        for sign, key in (("-", "only_in_a"), ("+", "only_in_b")):
            for p in params[key]:
                kind = "trainable" if p["trainable"] else "frozen"
                side = "A" if sign == "-" else "B"
                lines.append(
                    f"  {sign} {p['name']}: {kind} {p['dtype']} {_dims(p['shape'])} (only in {side})"
                )
        for entry in params["changed"]:
            lines.extend(_tensor_lines(entry["name"], entry))

    optimizer = report.get("optimizer")
    if optimizer and (optimizer["only_in_a"] or optimizer["only_in_b"] or optimizer["changed"]):
        lines.append("optimizer:")
        lines.extend(f"  - group {name} (only in A)" for name in optimizer["only_in_a"])
        lines.extend(f"  + group {name} (only in B)" for name in optimizer["only_in_b"])
        for group in optimizer["changed"]:
            name = group["name"]
            if "step" in group:
                lines.append(f"  ~ {name}: step {group['step']['a']} -> {group['step']['b']}")
            if "initial_learning_rate" in group:
                lr = group["initial_learning_rate"]
                lines.append(
                    f"  ~ {name}: initial_learning_rate {f32(float(lr['a']))} -> {f32(float(lr['b']))}"
                )
            states = group.get("states", {})
            for sign, key, side in (("-", "only_in_a", "A"), ("+", "only_in_b", "B")):
                lines.extend(
                    f"  {sign} {name}/{p}: optimizer state only in {side}" for p in states.get(key, [])
                )
            momentums = group.get("momentums", {})
            for sign, key, side in (("-", "only_in_a", "A"), ("+", "only_in_b", "B")):
                for m in momentums.get(key, []):
                    lines.append(
                        f"  {sign} {name}/{m['parameter']}/{m['momentum']}: {m['dtype']} "
                        f"{_dims(m['shape'])} (only in {side})"
                    )
            for m in momentums.get("changed", []):
                lines.extend(_tensor_lines(f"{name}/{m['parameter']}/{m['momentum']}", m))

    props = report.get("properties")
    if props and (props["removed"] or props["added"] or props["changed"]):
        lines.append("properties:")
        lines.extend(f"  - {p['name']} = {_property_text(p)} (only in A)" for p in props["removed"])
        lines.extend(f"  + {p['name']} = {_property_text(p)} (only in B)" for p in props["added"])
        lines.extend(
            f"  ~ {p['name']}: {_property_text(p['a'])} -> {_property_text(p['b'])}" for p in props["changed"]
        )

    count = report["differences"]
    lines.append(f"{count} difference{'' if count == 1 else 's'}")
    style = Style.for_stream(out) if style is None else style
    for line in lines:
        color = _LINE_COLORS.get(line[:3])
        print(style(line, color) if color else line, file=out)
