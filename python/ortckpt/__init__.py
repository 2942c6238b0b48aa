"""Read and write ONNX Runtime on-device training checkpoints without onnxruntime-training.

>>> import ortckpt
>>> state = ortckpt.load("checkpoint")            # memory-mapped, zero-copy
>>> state.parameters["fc1.weight"].data           # read-only numpy array
>>> state.properties["epoch"] = 4
>>> ortckpt.save(state, "checkpoint")             # atomic
"""

from . import errors
from ._version import __version__
from .errors import (
    CheckpointError,
    DuplicateNameError,
    ExternalDataError,
    InvalidCheckpointError,
    TensorDataError,
    UnsupportedVersionError,
)
from .io import DEFAULT_EXTERNAL_DATA_THRESHOLD, external_data_path, load, load_bytes, save, serialize
from .onnx_io import from_tensor_proto, load_into_model, save_from_onnx, save_tensor_protos, to_tensor_proto
from .state import CheckpointState, OptimizerGroup, Parameter, PropertyBag

__all__ = [
    "DEFAULT_EXTERNAL_DATA_THRESHOLD",
    "CheckpointError",
    "CheckpointState",
    "DuplicateNameError",
    "ExternalDataError",
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
    "save",
    "save_from_onnx",
    "save_tensor_protos",
    "serialize",
    "to_tensor_proto",
]
