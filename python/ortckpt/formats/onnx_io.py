"""ONNX interop: checkpoints from ``onnx.TensorProto``s and models, and checkpoints back into models.

The counterpart of ORT's ``SaveCheckpoint(trainable_protos, non_trainable_protos, path, nominal)`` and
``LoadCheckpointToModel``:

* ``save_tensor_protos(trainable, frozen, path)``: write a checkpoint from initializers.
* ``save_from_onnx(model_or_path, path, trainable=...)``: the same from a model's initializers.
* ``load_into_model(checkpoint, model)``: a copy of the model with the checkpoint's values.
* ``from_tensor_proto`` / ``to_tensor_proto``: one ``TensorProto`` <-> one ``Parameter``.

``onnx`` is an optional dependency (``pip install ortckpt[onnx]``): it is imported only when one of
these functions runs, so ``import ortckpt`` works without it.

Every storage form ONNX allows is read: ``raw_data``, the typed fields and external data.
Decoding lives in ``_proto_decode``; resolving, confining and memory-mapping external data files in
``_onnx_external``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .. import _dtypes, _native
from .._parameter import Parameter, tensor_of
from .._paths import StrPath, path_str
from .._scalars import check_name
from ..errors import CheckpointError, DuplicateNameError, ModelError
from ..io import DEFAULT_EXTERNAL_DATA_THRESHOLD, check_threshold, load
from ..state import CheckpointState
from ._onnx_external import ExternalFiles
from ._onnx_import import require_onnx
from ._proto_decode import as_proto, proto_name, tensor_from_proto

if TYPE_CHECKING:
    import onnx

    from .._native import CheckpointSpec, TensorSpec

    ProtoInput = onnx.TensorProto | bytes | bytearray | memoryview

__all__ = [
    "DEFAULT_EXTERNAL_DATA_THRESHOLD",
    "from_tensor_proto",
    "load_into_model",
    "save_from_onnx",
    "save_tensor_protos",
    "to_tensor_proto",
]

#: Initializers ``save_from_onnx`` makes trainable by default.
FLOAT_TYPES: frozenset[int] = frozenset({_dtypes.FLOAT, _dtypes.DOUBLE, _dtypes.FLOAT16, _dtypes.BFLOAT16})


# ------------------------------------------------------------------------------------------------
# TensorProto -> Parameter
# ------------------------------------------------------------------------------------------------


def from_tensor_proto(
    proto: ProtoInput, *, trainable: bool = True, base_dir: StrPath | None = None
) -> Parameter:
    """A ``Parameter`` holding the values of an ``onnx.TensorProto`` (or its serialized bytes).

    ``raw_data`` is used as is (no numpy conversion); typed fields are decoded bit-exactly the way
    ORT unpacks them (narrow integers keep the low bits of ``int32_data``, any non-zero BOOL value is
    true, float16/bfloat16/float8 values must be bit patterns in range, else ``TensorDataError`` as
    ORT's "data overflow"); external data is memory-mapped from a file under ``base_dir`` (the
    model's directory; required for external tensors; ``length`` may be left out to mean "to the end
    of the file"). Values in more than one place (say ``raw_data`` and ``float_data``) are an error.
    Raises ``TensorDataError`` for inconsistent tensors and ``ExternalDataError`` for external data
    that is missing, out of range or outside ``base_dir``.
    """
    tensor_proto = as_proto(proto, "tensor")
    name = proto_name(tensor_proto)
    tensor = tensor_from_proto(tensor_proto, name, ExternalFiles(base_dir), nominal=False)
    return Parameter._from_tensor(name, tensor, bool(trainable), tensor_proto.doc_string)


# ------------------------------------------------------------------------------------------------
# Writing checkpoints
# ------------------------------------------------------------------------------------------------


def _protos(items: Iterable[ProtoInput], what: str) -> list[onnx.TensorProto]:
    if isinstance(items, (str, bytes, bytearray, memoryview)) or not isinstance(items, Iterable):
        raise TypeError(f"{what} must be a list of onnx.TensorProto (or serialized TensorProtos)")
    return [as_proto(item, f"{what}[{i}]") for i, item in enumerate(items)]


def _write(
    trainable: list[onnx.TensorProto],
    frozen: list[onnx.TensorProto],
    path: StrPath,
    *,
    nominal: bool,
    external_data_threshold: int,
    base_dir: StrPath | None,
) -> None:
    threshold = check_threshold(external_data_threshold)
    files = ExternalFiles(base_dir)
    seen: dict[str, str] = {}
    specs: dict[str, list[TensorSpec]] = {"trainable": [], "frozen": []}
    for kind, protos in (("trainable", trainable), ("frozen", frozen)):
        for proto in protos:
            name = proto_name(proto)
            if name in seen:
                where = kind if seen[name] == kind else "trainable and frozen"
                raise DuplicateNameError(f"duplicate tensor name {name!r} ({where})")
            seen[name] = kind
            tensor = tensor_from_proto(proto, name, files, bool(nominal))
            # ORT's TensorProto path keeps each proto's doc_string in the checkpoint.
            doc = proto.doc_string or None
            specs[kind].append((name, tensor.data_type, tensor.shape, tensor.spec_data(name), doc))
    spec: CheckpointSpec = {
        "is_nominal": bool(nominal),
        "trainable": specs["trainable"],
        "frozen": specs["frozen"],
        "optimizer_groups": [],
        "properties": [],
    }
    _native.save_checkpoint(path_str(path), spec, external_data_threshold=threshold)


def save_tensor_protos(
    trainable: Iterable[ProtoInput],
    frozen: Iterable[ProtoInput],
    path: StrPath,
    *,
    nominal: bool = False,
    external_data_threshold: int = DEFAULT_EXTERNAL_DATA_THRESHOLD,
    base_dir: StrPath | None = None,
) -> None:
    """Write a checkpoint from ONNX initializers, like ORT's ``save_checkpoint(trainable_protos,
    frozen_protos, path, nominal_checkpoint)``.

    ``trainable`` and ``frozen`` hold ``onnx.TensorProto``s or their serialized bytes; a name may
    appear once across both (else ``DuplicateNameError``). With ``nominal=True`` only names and data
    types are written (no dims, no values; the tensors' data is not read), as ORT does for
    ``generate_artifacts(..., nominal_checkpoint=True)``. Tensors are written sorted by name; tensor
    data beyond ``external_data_threshold`` bytes goes to the external file ``<path>.data``.
    ``base_dir`` resolves TensorProtos whose data is in external files (see ``from_tensor_proto``).
    The write is atomic. TensorProto ``doc_string``s are stored in the checkpoint, as ORT does.
    """
    _write(
        _protos(trainable, "trainable"),
        _protos(frozen, "frozen"),
        path,
        nominal=nominal,
        external_data_threshold=external_data_threshold,
        base_dir=base_dir,
    )


def _load_model(model: onnx.ModelProto | StrPath, what: str) -> tuple[onnx.ModelProto, str | None]:
    """(a private copy of the model, the directory of its file or None)."""
    require_onnx()
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy, None
    if isinstance(model, (str, os.PathLike)):
        path = path_str(model)
        # Opened by the core: regular files only, refused without blocking (a FIFO would hang
        # onnx.load's open()); the mapping is parsed, then dropped.
        mapped = _native.MappedFile(path)
        data = memoryview(mapped)
        # a checkpoint, safetensors file, ... given as the model: say what it is and what reads it
        _native.expect_kind(bytes(data[: _native.SNIFF_LEN]), data.nbytes, "onnx", path)
        try:
            loaded = onnx.load_model_from_string(bytes(data))
        except DecodeError as exc:
            raise ModelError(f"{path}: not an ONNX model (protobuf cannot parse it: {exc})") from None
        return loaded, os.path.dirname(os.path.abspath(path))
    raise TypeError(f"{what} must be an onnx.ModelProto or a path, got {type(model).__name__}")


def save_from_onnx(
    model_or_path: onnx.ModelProto | StrPath,
    path: StrPath,
    *,
    trainable: Iterable[str] | None = None,
    nominal: bool = False,
    external_data_threshold: int = DEFAULT_EXTERNAL_DATA_THRESHOLD,
    base_dir: StrPath | None = None,
) -> None:
    """Write a checkpoint from the initializers of an ONNX model (its main graph).

    ``model_or_path`` is an ``onnx.ModelProto`` or a model file. A file is parsed without its
    external data; initializers kept in external files are memory-mapped from the model's directory
    (or ``base_dir``), so memory use stays bounded by the model file, not the weights. For a
    ``ModelProto`` with external initializers pass ``base_dir`` (the directory it was loaded from).

    ``trainable`` names the initializers to save as trainable (default: every float32, float64,
    float16 and bfloat16 initializer); every other initializer is saved frozen. A name that is not an
    initializer of the model is an error. ``nominal`` and ``external_data_threshold`` are as for
    ``save_tensor_protos``.
    """
    model, model_dir = _load_model(model_or_path, "model_or_path")
    base = model_dir if base_dir is None else base_dir
    chosen, frozen = split_initializers(model, trainable)
    _write(
        chosen, frozen, path, nominal=nominal, external_data_threshold=external_data_threshold, base_dir=base
    )


def split_initializers(
    model: onnx.ModelProto, trainable: Iterable[str] | None = None
) -> tuple[list[onnx.TensorProto], list[onnx.TensorProto]]:
    """The main-graph initializers of ``model`` as (trainable, frozen), in model order, by
    ``save_from_onnx``'s rule for ``trainable``; raises for duplicate or unknown names. Nothing is
    read from external data (``ortckpt from-onnx --dry-run`` uses this)."""
    inits = list(model.graph.initializer)
    names: list[str] = []
    seen: set[str] = set()
    for init in inits:
        name = proto_name(init)
        if name in seen:
            raise DuplicateNameError(f"the model has two initializers named {name!r}")
        seen.add(name)
        names.append(name)
    if trainable is None:
        chosen = {name for name, init in zip(names, inits) if init.data_type in FLOAT_TYPES}
    else:
        if isinstance(trainable, (str, bytes)):
            raise TypeError("trainable must be a collection of initializer names, not a single string")
        chosen = set()
        for item in trainable:
            chosen.add(check_name(item, "trainable"))
        unknown = sorted(chosen - seen)
        if unknown:
            raise ValueError(
                f"trainable names that are not initializers of the model: {unknown} "
                f"(initializers: {sorted(seen)[:20]}{' ...' if len(seen) > 20 else ''})"
            )
    return (
        [init for name, init in zip(names, inits) if name in chosen],
        [init for name, init in zip(names, inits) if name not in chosen],
    )


# ------------------------------------------------------------------------------------------------
# Checkpoint -> ONNX
# ------------------------------------------------------------------------------------------------


def to_tensor_proto(param: Parameter) -> onnx.TensorProto:
    """An ``onnx.TensorProto`` with the parameter's name, data type, dims and values.

    Numeric values go to ``raw_data`` (little-endian, as stored in the checkpoint), strings to
    ``string_data``: the same TensorProto ORT makes from a checkpoint tensor. Nominal parameters
    have no values and raise ``CheckpointError``.
    """
    require_onnx()
    import onnx.helper

    if not isinstance(param, Parameter):
        raise TypeError(f"expected a Parameter, got {type(param).__name__}")
    name = param.name
    tensor = tensor_of(param)
    if tensor.is_nominal:
        raise CheckpointError(
            f"parameter {name!r} is nominal (a name and data type without values): it has no TensorProto"
        )
    data = tensor.spec_data(name)
    dims = [int(d) for d in tensor.shape]
    if tensor.data_type == _dtypes.STRING:
        assert isinstance(data, list)
        proto = onnx.TensorProto()
        proto.name = name
        proto.data_type = tensor.data_type
        proto.dims.extend(dims)
        proto.string_data.extend(s.encode("utf-8") for s in data)
    else:
        assert data is not None and not isinstance(data, list)
        proto = onnx.helper.make_tensor(name, tensor.data_type, dims, bytes(memoryview(data)), raw=True)
    if param.doc_string:
        proto.doc_string = param.doc_string
    return proto


def load_into_model(
    checkpoint: CheckpointState | StrPath, model: onnx.ModelProto | StrPath
) -> onnx.ModelProto:
    """A copy of ``model`` whose initializers take the checkpoint's values, like ORT's
    ``LoadCheckpointToModel`` (``get_model_after_loading_checkpoint`` in Python).

    ``checkpoint`` is a ``CheckpointState`` or a checkpoint file; ``model`` an ``onnx.ModelProto``
    (not modified) or a model file (parsed without its external data). The rule, as ORT 1.19.2
    applies it (checked against it by the test suite):

    * Every initializer of the model's main graph whose name is a parameter of the checkpoint
      (trainable or frozen) is replaced as a whole by the checkpoint tensor: name, data type, dims
      and values (``raw_data``; ``string_data`` for strings). Nothing of the old initializer is kept
      (its doc_string, external data references, typed fields): a different data type or shape in the
      checkpoint simply wins, without a check or a conversion.
    * Initializers the checkpoint does not have are left unchanged (external data references
      included, still relative to the original model's directory); checkpoint parameters the model
      does not have are ignored. Initializer order, nodes and everything else stay as they are;
      sparse initializers and subgraphs are not looked at. Optimizer state and properties are not used.
    * An initializer without a name makes the model invalid: ``ValueError`` (ORT: "All initializers
      must have names"). ORT skips that check only for checkpoints without a module state table
      (ORT's own save of an empty CheckpointState); ortckpt always checks.
    * A nominal checkpoint has no values and is refused with ``CheckpointError``, as ORT refuses it
      ("Cannot load a nominal checkpoint to a model proto"), even when no names match.
    * Values a checkpoint keeps in its external data file are read from there, as ORT does.

    * A tensor's ``doc_string`` in the checkpoint (ORT's ``save_checkpoint`` of TensorProtos and
      ``save_tensor_protos`` store the protos' doc strings) becomes the replaced initializer's
      ``doc_string``, as ORT copies it; without one the replacement has none.
    """
    state = checkpoint if isinstance(checkpoint, CheckpointState) else load(checkpoint)
    if not isinstance(state, CheckpointState):  # pragma: no cover - load always returns one
        raise TypeError("checkpoint must be a CheckpointState or a path")
    if state.is_nominal:
        raise CheckpointError(
            f"cannot load a nominal checkpoint{_source(state)} into a model: it records names and data "
            "types only, no values (ORT refuses it too)"
        )
    out, _ = _load_model(model, "model")
    params = state.parameters
    cache: dict[str, onnx.TensorProto] = {}
    for i, init in enumerate(out.graph.initializer):
        if not init.HasField("name"):
            raise ValueError(f"the model is invalid: initializer #{i} has no name")
        param = params.get(init.name)
        if param is None:
            continue
        replacement = cache.get(init.name)
        if replacement is None:
            replacement = cache[init.name] = to_tensor_proto(param)
        init.CopyFrom(replacement)
    return out


def _source(state: CheckpointState) -> str:
    return "" if state.source is None else f" ({state.source})"
