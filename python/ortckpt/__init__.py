"""Read and write ONNX Runtime on-device training checkpoints without onnxruntime-training.

>>> import ortckpt
>>> state = ortckpt.load("checkpoint")            # memory-mapped, zero-copy
>>> state.parameters["fc1.weight"].data           # read-only numpy array
>>> state.properties["epoch"] = 4
>>> ortckpt.save(state, "checkpoint")             # crash-consistent
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from . import errors
from .errors import (
    CheckpointChangedError,
    CheckpointError,
    DuplicateNameError,
    ExternalDataError,
    InterruptedSaveError,
    InvalidCheckpointError,
    TensorDataError,
    UnsupportedVersionError,
)
from .io import (
    DEFAULT_EXTERNAL_DATA_THRESHOLD,
    external_data_path,
    load,
    load_bytes,
    recover,
    save,
    serialize,
)
from .onnx_io import from_tensor_proto, load_into_model, save_from_onnx, save_tensor_protos, to_tensor_proto
from .state import CheckpointState, OptimizerGroup, Parameter, PropertyBag

try:
    __version__ = version("ortckpt")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without metadata
    __version__ = "0+unknown"

__all__ = [
    "DEFAULT_EXTERNAL_DATA_THRESHOLD",
    "CheckpointChangedError",
    "CheckpointError",
    "CheckpointState",
    "DuplicateNameError",
    "ExternalDataError",
    "InterruptedSaveError",
    "InvalidCheckpointError",
    "OptimizerGroup",
    "Parameter",
    "PropertyBag",
    "TensorDataError",
    "UnsupportedVersionError",
    "__version__",
    "errors",
    "external_data_path",
    "from_tensor_proto",
    "load",
    "load_bytes",
    "load_into_model",
    "recover",
    "save",
    "save_from_onnx",
    "save_tensor_protos",
    "serialize",
    "to_tensor_proto",
]
