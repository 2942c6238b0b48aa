"""Validation and normalisation of names and scalar values stored in checkpoints."""

from __future__ import annotations

import math
import numbers
from typing import cast

import numpy as np

PropertyValue = int | float | str

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def check_name(name: object, what: str) -> str:
    """A name stored in the checkpoint: a ``str`` encodable as UTF-8 (returned as a plain ``str``)."""
    if not isinstance(name, str):
        raise TypeError(f"{what} name must be str, got {type(name).__name__}: {name!r}")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} name {name!r} is not valid Unicode (cannot be encoded as UTF-8)") from exc
    return str(name)


def check_string(value: str, what: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what}: string {value!r} cannot be encoded as UTF-8") from exc
    return str(value)


def is_int(value: object) -> bool:
    """True for Python and numpy integers, but not for bools."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def to_int64(value: object, what: str) -> int:
    if not is_int(value):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}: {value!r}")
    result = int(cast("int", value))
    if not INT64_MIN <= result <= INT64_MAX:
        raise OverflowError(f"{what} = {result} does not fit in a signed 64-bit integer")
    return result


def to_float32(value: object, what: str) -> float:
    """A Python float holding the float32 value ORT stores (``float(np.float32(value))``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating)):
        raise TypeError(f"{what} must be a float, got {type(value).__name__}: {value!r}")
    as_float = float(value)
    with np.errstate(over="ignore"):
        result = float(np.float32(as_float))
    if math.isinf(result) and not math.isinf(as_float):
        raise OverflowError(f"{what} = {as_float!r} is out of range for a 32-bit float")
    return result


def to_property_value(value: object, key: str) -> PropertyValue:
    """Normalise a property value: int (int64), float (rounded to float32) or str."""
    what = f"property {key!r}"
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what}: bool values are not supported (ORT properties are int, float or str)")
    if is_int(value):
        return to_int64(value, what)
    if isinstance(value, (float, np.floating)):
        return to_float32(value, what)
    if isinstance(value, str):
        return check_string(value, what)
    raise TypeError(f"{what}: value must be int, float or str, got {type(value).__name__}: {value!r}")
