"""Conversions between checkpoints and the formats the rest of the ecosystem reads.

* ``to_safetensors`` / ``from_safetensors`` (read and written by ortckpt; no extra package);
* ``to_npz`` / ``from_npz`` (numpy only; holds every checkpoint dtype, strings included);
* ``to_state_dict`` / ``from_state_dict``: a plain ``dict[str, numpy.ndarray]``;
* ``to_torch``: a ``dict[str, torch.Tensor]`` when torch is installed;
* ``convert(src, out)``: any of those files <-> an ORT checkpoint, chosen by extension;
* ``to_nominal``: the nominal checkpoint of a state (names and data types, no values).

What the files hold besides tensors (trainable flags, properties, optimizer groups) is described in
``ortckpt.formats._flat_layout`` and docs/federated.md; round trips through safetensors and npz are bit-exact.
Sources and outputs may be fsspec URLs (``ortckpt[remote]``): a remote input is copied to a
temporary file in chunks, and an output is written locally and then uploaded; ``file://`` and
``local://`` URLs are local paths.

What is refused, and why (``ConversionError``, a ``CheckpointError``; ``OSError`` for the OS):

* a malformed input (any malformation of an npz, safetensors file or their layout, named by file
  and tensor or member), and npz members that would decompress past ``max_decompressed_bytes``;
* losing data without being asked: the optimizer state is kept whenever the source has one, and
  dropped only with ``include_optimizer_state=False`` (``--drop-optimizer``);
* reading a FIFO, device or directory as an input, or replacing one with an output (every output
  is written to a new file that replaces the target only when complete).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .. import _dtypes, _native
from .._paths import StrPath
from .._sources import is_url, load, local_input, local_output, open_state
from .._types import CheckpointSource
from ..errors import ConversionError
from ..io import load_bytes, save
from ..state import CheckpointState
from . import _npz, _safetensors
from ._flat_layout import array_of, build_state, momentum_key, tensors_of

#: What conversions take as a source: a state, a checkpoint's bytes, or a path / fsspec URL.
Source = CheckpointSource

__all__ = [
    "ConversionError",
    "convert",
    "format_of",
    "from_npz",
    "from_safetensors",
    "from_state_dict",
    "momentum_key",
    "to_nominal",
    "to_npz",
    "to_safetensors",
    "to_state_dict",
    "to_torch",
]

_FORMATS = {".safetensors": "safetensors", ".npz": "npz"}


def format_of(path: StrPath) -> str:
    """``"safetensors"``, ``"npz"`` or ``"ckpt"`` (any other extension) for a path or URL."""
    name = os.fsdecode(os.fspath(path)).lower()
    for ext, fmt in _FORMATS.items():
        if name.endswith(ext):
            return fmt
    return "ckpt"


def _with_optimizer(state: CheckpointState, include_optimizer_state: bool | None) -> bool:
    """Whether to write the optimizer state: what the caller said, else whenever there is one
    (a conversion never drops data it was not told to drop)."""
    return state.optimizer is not None if include_optimizer_state is None else include_optimizer_state


def to_safetensors(
    src: Source,
    out: StrPath,
    *,
    include_optimizer_state: bool | None = None,
    storage_options: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> None:
    """Write the parameters of ``src`` (a state, checkpoint bytes, or a path/URL) to a safetensors
    file, atomically.

    Parameters keep their names; the momentums (kept unless ``include_optimizer_state=False``)
    are stored under ``__optimizer__/<group>/<parameter>/<momentum>``. Trainable flags,
    properties and optimizer groups go into the metadata key ``"ortckpt"``, so
    ``from_safetensors`` gives the state back bit for bit. safetensors cannot hold string or
    complex128 tensors: ``ConversionError`` names them (``.npz`` holds every dtype).
    ``progress`` shows a bar on a terminal.
    """
    state = open_state(src, storage_options=storage_options)
    with local_output(out, storage_options) as path:
        _safetensors.write(
            state,
            path,
            include_optimizer_state=_with_optimizer(state, include_optimizer_state),
            show_progress=progress,
        )


def from_safetensors(
    path: StrPath,
    *,
    trainable: Iterable[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    progress: bool = False,
    max_bytes: int | None = None,
) -> CheckpointState:
    """A ``CheckpointState`` from a safetensors file, read into private memory once (tensors are
    views of it, not copies; another program truncating the file cannot affect them).

    Files written by ``to_safetensors`` come back whole (flags, properties, optimizer state). For
    other files every tensor is a parameter: floating-point ones trainable, the rest frozen, unless
    ``trainable`` lists the trainable names (which also overrides recorded flags). ``max_bytes``
    refuses larger files, local or behind a URL (``SourceTooLargeError``), as ``load`` does.
    """
    with local_input(path, storage_options, max_bytes) as local:
        state = _safetensors.read(local, trainable=trainable, show_progress=progress, max_bytes=max_bytes)
        # a URL's temporary copy is removed on return: give the state memory of its own
        return load_bytes(state.to_bytes()) if is_url(path) else state


def to_npz(
    src: Source,
    out: StrPath,
    *,
    include_optimizer_state: bool | None = None,
    storage_options: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> None:
    """Write ``src`` to an uncompressed ``.npz`` archive (one tensor at a time), atomically.

    Keys are as for ``to_safetensors``; the layout is the member ``__ortckpt__``. bfloat16/float8
    tensors are stored as raw ``uint16``/``uint8`` views and string tensors as numpy unicode arrays,
    both restored by ``from_npz`` (strings ending in NUL cannot be stored: ``ConversionError``).
    """
    state = open_state(src, storage_options=storage_options)
    with local_output(out, storage_options) as path:
        _npz.write(
            state,
            path,
            include_optimizer_state=_with_optimizer(state, include_optimizer_state),
            show_progress=progress,
        )


def from_npz(
    path: StrPath,
    *,
    trainable: Iterable[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    progress: bool = False,
    max_decompressed_bytes: int | None = None,
    max_bytes: int | None = None,
) -> CheckpointState:
    """A ``CheckpointState`` from a ``.npz`` archive, read into private memory once (uncompressed
    members are views of it).

    Flags as for ``from_safetensors``. Archives are never unpickled: object arrays are refused.
    Compressed members may expand to ``max_decompressed_bytes`` in total (default: 8 times the
    archive's size, at least 64 MiB); a larger total, or a member that decompresses past the size
    it declares, is a ``ConversionError`` before the memory is spent. ``max_bytes`` refuses larger
    archives, local or behind a URL (``SourceTooLargeError``), as ``load`` does.
    """
    with local_input(path, storage_options, max_bytes) as local:
        state = _npz.read(
            local,
            trainable=trainable,
            show_progress=progress,
            max_decompressed_bytes=max_decompressed_bytes,
            max_bytes=max_bytes,
        )
        # a URL's temporary copy is removed on return: give the state memory of its own
        return load_bytes(state.to_bytes()) if is_url(path) else state


def to_state_dict(src: Source, *, include_optimizer_state: bool = False) -> dict[str, np.ndarray[Any, Any]]:
    """``{name: array}`` of every parameter (read-only, zero-copy views where possible).

    With ``include_optimizer_state`` the momentums are added under
    ``__optimizer__/<group>/<parameter>/<momentum>``. Flags, properties and optimizer steps are not
    kept (use safetensors or npz for a lossless copy). ``safetensors.numpy.save_file`` and
    ``numpy.savez`` take the result as it is; ``to_torch`` gives torch tensors for
    ``safetensors.torch``.
    """
    state = open_state(src)
    items, _ = tensors_of(state, include_optimizer_state)
    return {key: array_of(state, provider) for key, provider in items}


def from_state_dict(
    tensors: Mapping[str, Any],
    *,
    trainable: Iterable[str] | None = None,
    properties: Mapping[str, object] | None = None,
) -> CheckpointState:
    """A ``CheckpointState`` from ``{name: array}`` (numpy arrays, or anything with ``.numpy()``
    such as CPU torch tensors). Floating-point arrays are trainable unless ``trainable`` names
    the trainable ones."""
    arrays = {str(name): _as_numpy(value) for name, value in tensors.items()}
    state = build_state("state dict", arrays, None, trainable)
    if properties:
        state.properties = properties
    return state


def _as_numpy(value: Any) -> np.ndarray[Any, Any]:
    if isinstance(value, np.ndarray):
        return value
    numpy_method = getattr(value, "numpy", None)
    if callable(numpy_method):
        return _torch_to_numpy(value)
    return np.asarray(value)


# torch dtypes viewed by size for the ml_dtypes types (torch names them as ml_dtypes does)
_TORCH_VIEWS = {1: "uint8", 2: "int16"}


def _torch_to_numpy(tensor: Any) -> np.ndarray[Any, Any]:
    import torch

    tensor = tensor.detach().cpu().contiguous()
    name = str(tensor.dtype).replace("torch.", "")
    code = _dtypes.from_name(name)
    if code is not None and _dtypes.is_ml_dtype(code):
        dtype = _dtypes.to_numpy(code)
        raw = tensor.view(getattr(torch, _TORCH_VIEWS[dtype.itemsize])).numpy()
        return raw.view(dtype)  # type: ignore[no-any-return]
    return tensor.numpy()  # type: ignore[no-any-return]


def to_torch(src: Source, *, include_optimizer_state: bool = False) -> dict[str, Any]:
    """``{name: torch.Tensor}`` (CPU copies) of every parameter, bfloat16/float8 included; needs
    torch. String tensors are refused (``ConversionError``)."""
    try:
        import torch
    except ImportError:
        raise ImportError("to_torch needs PyTorch (pip install torch)") from None
    out: dict[str, Any] = {}
    for key, array in to_state_dict(src, include_optimizer_state=include_optimizer_state).items():
        if array.dtype == np.dtype(object):
            raise ConversionError(f"tensor {key!r} is a string tensor: torch cannot hold it")
        name = array.dtype.name
        if _dtypes.is_ml_dtype(_dtypes.from_name(name)):
            raw = torch.from_numpy(array.view(_TORCH_VIEWS[array.dtype.itemsize]).copy())
            out[key] = raw.view(getattr(torch, name))
        else:
            out[key] = torch.from_numpy(np.array(array))
    return out


def to_nominal(src: Source, *, keep_properties: bool = True) -> CheckpointState:
    """The nominal checkpoint of ``src``: every parameter's name, trainable flag and data type,
    without shapes or values (what ORT's ``generate_artifacts(..., nominal_checkpoint=True)``
    writes), to ship a model's structure to devices without its weights. Optimizer state is
    dropped; properties are kept unless ``keep_properties`` is False."""
    state = open_state(src)
    trainable: list[Any] = []
    frozen: list[Any] = []
    for name, param in state.parameters.items():
        (trainable if param.trainable else frozen).append((name, param.data_type, [], None))
    spec: Any = {
        "is_nominal": True,
        "trainable": trainable,
        "frozen": frozen,
        "optimizer_groups": [],
        "properties": list(state.properties.items()) if keep_properties else [],
    }
    return load_bytes(_native.serialize_checkpoint(spec))


def load_source(
    src: StrPath,
    *,
    trainable: Iterable[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> CheckpointState:
    """The state ``convert`` reads from ``src`` (format by extension, as in ``convert``), with the
    ``trainable`` flags applied: what a dry run of a conversion checks."""
    kind = format_of(src)
    if kind == "ckpt":
        state = load(src, storage_options=storage_options)
    elif kind == "safetensors":
        state = from_safetensors(src, trainable=trainable, storage_options=storage_options, progress=progress)
    else:
        state = from_npz(src, trainable=trainable, storage_options=storage_options, progress=progress)
    if trainable is not None and kind == "ckpt":
        wanted = set(trainable)
        missing = sorted(wanted - set(state.parameters))
        if missing:
            raise ConversionError(f"{os.fsdecode(os.fspath(src))}: no parameter {missing[0]!r}")
        for name, param in state.parameters.items():
            param.trainable = name in wanted
    return state


def convert(
    src: StrPath,
    out: StrPath,
    *,
    include_optimizer_state: bool | None = None,
    trainable: Iterable[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    progress: bool = False,
    format_version: int = 2,
) -> CheckpointState:
    """Convert between ORT checkpoints, safetensors and npz files, choosing each format by
    extension (``.safetensors``, ``.npz``, anything else an ORT checkpoint; an input checkpoint
    may also be the folder ORT 1.15 wrote). ``format_version`` applies to a checkpoint output:
    2 for ORT 1.18 and later, 1 for ORT 1.16-1.17. Inputs are
    memory-mapped and safetensors/npz outputs written tensor by tensor, so no copy of the model is
    made (an ORT checkpoint output is written by ``ortckpt.save`` straight from the mapped
    inputs). Returns the state that was written (backed by the input's mapping).

    The optimizer state is converted whenever the source has one; ``include_optimizer_state=False``
    leaves it out (the only way a conversion drops it). ``out`` may name ``src`` itself: the output
    replaces it atomically, and the input stays readable until then.
    """
    state = load_source(src, trainable=trainable, storage_options=storage_options, progress=progress)
    include_optimizer_state = _with_optimizer(state, include_optimizer_state)
    target = format_of(out)
    if target == "safetensors":
        to_safetensors(
            state,
            out,
            include_optimizer_state=include_optimizer_state,
            storage_options=storage_options,
            progress=progress,
        )
    elif target == "npz":
        to_npz(
            state,
            out,
            include_optimizer_state=include_optimizer_state,
            storage_options=storage_options,
            progress=progress,
        )
    else:
        with local_output(out, storage_options) as path:
            save(state, path, include_optimizer_state=include_optimizer_state, format_version=format_version)
    return state
