"""Read the checkpoint *folder* that ONNX Runtime 1.15 wrote (before the ``ODTC`` flatbuffer).

The folder's rules are in docs/format.md (§12.2). The Rust core knows which file holds what
(``_native.legacy_file_kind``) and parses the framing of each ``.pbseq`` file
(``_native.pbseq_messages``); the messages are ``onnx.TensorProto``s, decoded by onnx
(``_proto_decode``). This module reads the files and builds the ``CheckpointState``.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field

import numpy as np

from . import _dtypes, _native
from ._containers import OptimizerGroups, ParameterStore
from ._onnx_external import ExternalFiles
from ._optimizer import Momentums, MomentumStates, OptimizerGroup
from ._parameter import Parameter
from ._properties import PropertyBag
from ._proto_decode import as_proto, tensor_from_proto
from ._scalars import PropertyValue
from ._tensor import Tensor
from .errors import (
    CheckpointError,
    DuplicateNameError,
    ExternalDataError,
    InvalidCheckpointError,
    TensorDataError,
)
from .state import CheckpointState

__all__ = ["FOLDER_VERSION", "load_folder"]

#: ``CheckpointState.version`` of a state loaded from an ORT 1.15 folder: the folder format
#: predates the flatbuffer format, whose versions start at 1.
FOLDER_VERSION = 0

_LR_PROPERTY = _native.LEGACY_LR_PROPERTY
_STEP_PROPERTY = _native.LEGACY_STEP_PROPERTY
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL


@dataclass
class _Group:
    momentum_files: dict[str, str] = field(default_factory=dict)  # momentum name -> file
    properties_file: str | None = None


def _read_file(folder: str, real_folder: str, entry: str) -> bytes:
    """The bytes of ``folder/entry``: a regular file inside the folder (symlinks may not lead out)."""
    path = os.path.join(folder, entry)
    real = os.path.realpath(path)
    if os.path.commonpath([real, real_folder]) != real_folder or real == real_folder:
        raise InvalidCheckpointError(
            f"{path}: is a symbolic link leading out of the checkpoint folder ({real}); "
            "copy the file into the folder instead"
        )
    # checked before opening: opening a FIFO would block
    if not stat.S_ISREG(os.stat(real).st_mode):
        raise InvalidCheckpointError(f"{path}: not a regular file")
    with open(real, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise InvalidCheckpointError(f"{path}: not a regular file")
        data = f.read(info.st_size)
    if len(data) != info.st_size:
        raise InvalidCheckpointError(f"{path}: changed size while being read")
    return data


def _protos(folder: str, real_folder: str, entry: str) -> list[tuple[str, Tensor]]:
    """The tensors of one ``.pbseq`` file, in file order, as (name, tensor)."""
    path = os.path.join(folder, entry)
    data = _read_file(folder, real_folder, entry)
    ranges = _native.pbseq_messages(data, path)
    view = memoryview(data)
    no_external = ExternalFiles(None)
    out: list[tuple[str, Tensor]] = []
    for i, (offset, length) in enumerate(ranges):
        try:
            proto = as_proto(
                view[offset : offset + length], f"message {i} (bytes {offset}..{offset + length})"
            )
            name = proto.name
            if not name:
                raise InvalidCheckpointError(
                    f"message {i} (bytes {offset}..{offset + length}): tensor has no name"
                )
            if proto.data_location == _EXTERNAL:
                raise ExternalDataError(
                    f"tensor {name!r}: ORT 1.15 checkpoints hold their data inline; "
                    "external data is not allowed"
                )
            out.append((name, tensor_from_proto(proto, name, no_external, nominal=False)))
        except CheckpointError as exc:
            raise type(exc)(f"{path}: {exc}") from None
        except ValueError as exc:  # e.g. a name that is not valid Unicode
            raise TensorDataError(f"{path}: message {i}: {exc}") from None
    return out


def _unique(pairs: list[tuple[str, Tensor]], what: str, path: str) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    for name, tensor in pairs:
        if name in out:
            raise DuplicateNameError(f"{path}: duplicate {what} name {name!r}")
        out[name] = tensor
    return out


def _scalar(tensor: Tensor, name: str, path: str) -> PropertyValue:
    """A property's value: a one-element FLOAT, INT64 or STRING tensor (ORT's rule)."""
    if tensor.data_type not in (_dtypes.FLOAT, _dtypes.INT64, _dtypes.STRING):
        raise InvalidCheckpointError(
            f"{path}: property {name!r} has data type {_dtypes.type_name(tensor.data_type)}; "
            "properties are float, int64 or string scalars"
        )
    values = tensor.array(name)
    if values.size != 1:
        raise InvalidCheckpointError(
            f"{path}: property {name!r} holds {values.size} values; properties are scalars"
        )
    value = values.reshape(-1)[0]
    if tensor.data_type == _dtypes.STRING:
        return str(value)
    if tensor.data_type == _dtypes.INT64:
        return int(value)
    return float(np.float32(value))


def _properties(folder: str, real_folder: str, entry: str) -> list[tuple[str, PropertyValue]]:
    path = os.path.join(folder, entry)
    tensors = _unique(_protos(folder, real_folder, entry), "property", path)
    return [(name, _scalar(tensor, name, path)) for name, tensor in tensors.items()]


def _group(folder: str, real_folder: str, name: str, files: _Group) -> OptimizerGroup:
    if files.properties_file is None:
        raise InvalidCheckpointError(
            f"{folder}: optimizer group {name!r} has momentum files but no optim_{name}_properties.pbseq "
            "(its step and learning rate); the folder is incomplete"
        )
    path = os.path.join(folder, files.properties_file)
    props = dict(_properties(folder, real_folder, files.properties_file))
    expected = {_LR_PROPERTY: float, _STEP_PROPERTY: int}
    for key, kind in expected.items():
        if not isinstance(props.get(key), kind):
            raise InvalidCheckpointError(
                f"{path}: needs a {kind.__name__} property {key!r}, found {props.get(key)!r}"
            )
    extra = sorted(set(props) - set(expected))
    if extra:
        raise InvalidCheckpointError(f"{path}: unexpected optimizer group properties {extra!r}")
    # param name -> momentum name -> tensor; ORT keeps one file per momentum
    per_param: dict[str, dict[str, Tensor]] = {}
    for momentum, entry in sorted(files.momentum_files.items()):
        file_path = os.path.join(folder, entry)
        for param, tensor in _unique(_protos(folder, real_folder, entry), "parameter", file_path).items():
            per_param.setdefault(param, {})[momentum] = tensor
    states = MomentumStates()
    for param, tensors in per_param.items():
        states[param] = Momentums._from_tensors(param, tensors)
    lr, step = props[_LR_PROPERTY], props[_STEP_PROPERTY]
    assert isinstance(lr, float) and isinstance(step, int)  # checked above
    return OptimizerGroup._from_parts(step, lr, states)


def load_folder(folder: str) -> CheckpointState:
    """Load the checkpoint folder ORT 1.15 wrote (see docs/format.md for its rules)."""
    real_folder = os.path.realpath(folder)
    entries = sorted(os.listdir(folder))
    params: dict[str, Parameter] = {}
    groups: dict[str, _Group] = {}
    properties: list[tuple[str, PropertyValue]] = []
    used = 0
    for entry in entries:
        path = os.path.join(folder, entry)
        if os.path.isdir(path):  # ORT skips subdirectories (and hidden entries, and other names)
            continue
        kind = _native.legacy_file_kind(entry, folder)
        if kind is None:
            continue
        what, group, momentum = kind
        if what in ("trainable", "frozen"):
            for name, tensor in _protos(folder, real_folder, entry):
                if name in params:
                    raise DuplicateNameError(f"{path}: duplicate parameter name {name!r}")
                params[name] = Parameter._from_tensor(name, tensor, what == "trainable")
        elif what == "custom_properties":
            properties.extend(_properties(folder, real_folder, entry))
        elif group is not None:
            files = groups.setdefault(group, _Group())
            if what == "momentum" and momentum is not None:
                files.momentum_files[momentum] = entry
            else:
                files.properties_file = entry
        used += 1
    if used == 0:
        # (ORT 1.15 writes an empty state as an empty folder, but an empty or unrelated directory is
        # far more likely a wrong path than such a checkpoint)
        raise IsADirectoryError(
            errno.EISDIR,
            "Is a directory, and not an ORT 1.15 checkpoint folder (it has no paramtrain_/paramfrozen_/"
            "optim_/custom_ .pbseq files); checkpoints of later ORT releases are single files",
            folder,
        )
    seen: set[str] = set()
    for name, _ in properties:
        if name in seen:
            raise DuplicateNameError(f"{folder}: duplicate property name {name!r}")
        seen.add(name)
    optimizer = None
    if groups:
        optimizer = OptimizerGroups(
            {name: _group(folder, real_folder, name, files) for name, files in sorted(groups.items())}
        )
    return CheckpointState._from_loaded(
        version=FOLDER_VERSION,
        is_nominal=False,
        has_external_data=False,
        params=ParameterStore(params),
        optimizer=optimizer,
        properties=PropertyBag(properties),
        source=folder,
    )
